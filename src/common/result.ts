/**
 * Expected outcomes are values, not exceptions: `{ ok: true, ...value }` or
 * `{ ok: false, reason, ...context }`. The reason is a string-literal union per
 * operation so callers can switch over it exhaustively.
 */
export type Ok<T extends object = object> = { readonly ok: true } & T;
export type Refused<R extends string, C extends object = object> = { readonly ok: false; readonly reason: R } & C;
