/**
 * The judge of a run: reads what guards decided (their logs), what tokens
 * travelled (captured off the wire), and what clients were told succeeded,
 * and reports every violation of the fencing promise with the smallest piece
 * of history that shows it. Pure and linear in the size of the history.
 *
 * Checked:
 *  - epoch_went_down: a guard accepted epoch e after accepting a larger one for the resource (S4);
 *  - duplicate_token: two different valid tokens for one (resource, epoch) anywhere in the history (S1);
 *  - invalid_token: a guard accepted a token that does not verify against the cluster (S5);
 *  - unverified_token: a client obtained (holds) a token that does not verify: a client checks every token it
 *    combines before it returns it, so no honest client ever holds one;
 *  - lost_write: a write a client saw acknowledged is missing from the guard's log, or the final
 *    stored version of a key is not the one its last accepted write produced (keys whose final
 *    state could not be read are skipped: `unreadFinal`);
 *  - across a reshare (`reshares`, `tokenGenerations`): cluster_changed, the description after a
 *    membership change has another cluster id or group key, or is not a newer membership;
 *    epoch_below_reshare, a token the workload obtained under a later share generation has an epoch
 *    below one it obtained under an earlier generation for the same resource (the new set re-granted
 *    an epoch the old set had already given out: its members did not inherit the old records).
 *    A later token at the same epoch as an earlier one is the same token re-signed, or a duplicate_token.
 */
import { checkToken } from '../token/admission-token.js';
import { toHex } from '../common/bytes.js';
import { tokenDigest } from '../token/admission-token.js';
import type { Cluster } from '../cluster/description.js';
import type { GuardLogEntry } from '../guard/log.js';

/** A write the client was told succeeded. */
export interface AcknowledgedWrite {
  /** Which guard (index into History.guardLogs) acknowledged it. */
  readonly guard: number;
  readonly resource: string;
  readonly key: string;
  /** hex SHA-256 of the token the write carried. */
  readonly tokenDigest: string;
  /** The data version the guard reported for the write. */
  readonly version: number;
}

export interface History {
  /** One log per guard, each in its own seq order. */
  readonly guardLogs: readonly (readonly GuardLogEntry[])[];
  /**
   * Admission tokens (base64url) clients obtained: each must verify (an invalid one is `unverified_token`), and two
   * valid ones for one (resource, epoch) are a duplicate.
   */
  readonly capturedTokens?: readonly string[];
  readonly acknowledged?: readonly AcknowledgedWrite[];
  /** Per guard, the data version each key holds at the end (`resource \u0000 key` → version; absent = deleted or never written). */
  readonly finalVersions?: readonly ReadonlyMap<string, number>[];
  /**
   * Per guard, keys whose final version could not be read (the resource did not answer): the final-version
   * check skips them rather than call them lost; whoever collected the history reports them.
   */
  readonly unreadFinal?: readonly ReadonlySet<string>[];
  /**
   * By token text, the share generation (the membershipVersion of the client's description) each token the
   * workload obtained was granted under. Tokens seen otherwise (replayed, tampered) are absent.
   */
  readonly tokenGenerations?: ReadonlyMap<string, number>;
  /** Membership changes during the run (reshares): the description before and after each. */
  readonly reshares?: readonly { readonly before: Cluster; readonly after: Cluster }[];
}

/** A token as the cross-reshare check names it. */
export interface GenerationToken {
  readonly generation: number;
  readonly epoch: string;
  readonly digest: string;
}

/** Where a token was seen: a guard log entry, or the captured list. */
export type Sighting =
  { readonly guard: number; readonly entry: GuardLogEntry } | { readonly captured: number; readonly token: string };

export type Violation =
  | {
      readonly kind: 'epoch_went_down';
      readonly guard: number;
      readonly resource: string;
      readonly earlier: GuardLogEntry;
      readonly later: GuardLogEntry;
    }
  | {
      readonly kind: 'duplicate_token';
      readonly resource: string;
      readonly epoch: string;
      readonly first: { readonly digest: string; readonly seen: Sighting };
      readonly second: { readonly digest: string; readonly seen: Sighting };
    }
  | { readonly kind: 'invalid_token'; readonly guard: number; readonly entry: GuardLogEntry; readonly why: string }
  | { readonly kind: 'unverified_token'; readonly captured: number; readonly why: string }
  | { readonly kind: 'cluster_changed'; readonly membership: number; readonly why: string }
  | {
      readonly kind: 'epoch_below_reshare';
      readonly resource: string;
      /** The highest token of the earlier generation, and the lowest of the later one below it. */
      readonly earlier: GenerationToken;
      readonly later: GenerationToken;
    }
  | {
      readonly kind: 'lost_write';
      readonly write: AcknowledgedWrite;
      readonly why: string;
      readonly entry?: GuardLogEntry;
    };

export interface HistoryStats {
  readonly entries: number;
  readonly accepted: number;
  readonly refusedByReason: Readonly<Record<string, number>>;
  readonly tokensChecked: number;
}

export type HistoryCheck =
  | { readonly ok: true; readonly stats: HistoryStats }
  | { readonly ok: false; readonly stats: HistoryStats; readonly violations: readonly Violation[] };

const keyOf = (resource: string, key: string | null) => `${resource}\u0000${key ?? ''}`;

export function checkHistory(history: History, cluster: Cluster): HistoryCheck {
  const violations: Violation[] = [];
  let entries = 0;
  let accepted = 0;
  const refusedByReason: Record<string, number> = {};

  // Each distinct token text is verified once, however often it appears.
  const verified = new Map<string, { valid: boolean; resource: string; epoch: string; digest: string; why: string }>();
  const verify = (text: string) => {
    let result = verified.get(text);
    if (!result) {
      const check = checkToken(text, cluster);
      result = check.ok
        ? {
            valid: true,
            resource: check.token.grant.resource,
            epoch: check.token.grant.epoch.toString(),
            digest: toHex(tokenDigest(check.token)),
            why: '',
          }
        : { valid: false, resource: '', epoch: '', digest: '', why: `${check.reason}: ${check.message}` };
      verified.set(text, result);
    }
    return result;
  };

  // S1: the first valid token seen per (resource, epoch); any other valid one is a duplicate.
  const firstToken = new Map<string, { digest: string; seen: Sighting }>();
  const reportedPairs = new Set<string>();
  const sawValidToken = (text: string, seen: Sighting) => {
    const token = verify(text);
    if (!token.valid) return;
    const slot = `${token.resource}\u0000${token.epoch}`;
    const first = firstToken.get(slot);
    if (!first) firstToken.set(slot, { digest: token.digest, seen });
    else if (first.digest !== token.digest && !reportedPairs.has(`${slot}\u0000${token.digest}`)) {
      reportedPairs.add(`${slot}\u0000${token.digest}`);
      violations.push({
        kind: 'duplicate_token',
        resource: token.resource,
        epoch: token.epoch,
        first,
        second: { digest: token.digest, seen },
      });
    }
  };

  // Accepted entries by (guard, resource, key, version), for matching acknowledgements.
  const acceptedWrites = new Map<string, GuardLogEntry>();
  const lastAcceptedVersion: Map<string, number | null>[] = [];

  history.guardLogs.forEach((log, guard) => {
    const highest = new Map<string, GuardLogEntry>();
    const lastVersion = new Map<string, number | null>();
    lastAcceptedVersion.push(lastVersion);
    for (const entry of log) {
      entries++;
      if (!entry.accepted) {
        refusedByReason[entry.outcome] = (refusedByReason[entry.outcome] ?? 0) + 1;
        // A refused conflict still carries two tokens for one epoch: if both verify, S1 broke.
        if (entry.outcome === 'conflict') {
          if (entry.conflictingToken) sawValidToken(entry.conflictingToken, { guard, entry });
          if (entry.token) sawValidToken(entry.token, { guard, entry });
        }
        continue;
      }
      accepted++;
      if (!entry.token || !entry.epoch) {
        violations.push({ kind: 'invalid_token', guard, entry, why: 'accepted without a recorded token' });
        continue;
      }
      const token = verify(entry.token);
      if (!token.valid || token.resource !== entry.resource || token.epoch !== entry.epoch) {
        violations.push({
          kind: 'invalid_token',
          guard,
          entry,
          why: token.valid ? 'token fields differ from the entry' : token.why,
        });
        continue;
      }
      sawValidToken(entry.token, { guard, entry });
      const top = highest.get(entry.resource);
      if (top && BigInt(entry.epoch) < BigInt(top.epoch!)) {
        violations.push({ kind: 'epoch_went_down', guard, resource: entry.resource, earlier: top, later: entry });
      } else {
        highest.set(entry.resource, entry);
      }
      if (entry.key !== null && (entry.op === 'put' || entry.op === 'delete')) {
        lastVersion.set(keyOf(entry.resource, entry.key), entry.op === 'delete' ? null : entry.version);
        if (entry.version !== null)
          acceptedWrites.set(`${guard}\u0000${keyOf(entry.resource, entry.key)}\u0000${entry.version}`, entry);
      }
    }
  });

  (history.capturedTokens ?? []).forEach((token, captured) => {
    const checked = verify(token);
    if (!checked.valid) violations.push({ kind: 'unverified_token', captured, why: checked.why });
    else sawValidToken(token, { captured, token });
  });

  for (const write of history.acknowledged ?? []) {
    const entry = acceptedWrites.get(`${write.guard}\u0000${keyOf(write.resource, write.key)}\u0000${write.version}`);
    if (!entry)
      violations.push({
        kind: 'lost_write',
        write,
        why: 'acknowledged, but no accepted entry with that version is in the guard log',
      });
    else if (entry.tokenDigest !== write.tokenDigest) {
      violations.push({
        kind: 'lost_write',
        write,
        entry,
        why: 'the guard log credits that version to a different token',
      });
    }
  }

  history.finalVersions?.forEach((finalVersions, guard) => {
    const expected = lastAcceptedVersion[guard] ?? new Map<string, number | null>();
    const unread = history.unreadFinal?.[guard];
    for (const [slot, version] of expected) {
      if (unread?.has(slot)) continue;
      const actual = finalVersions.get(slot);
      if (version !== null && actual !== version) {
        const [resource, key] = slot.split('\u0000') as [string, string];
        const write = (history.acknowledged ?? []).find(
          (w) => w.guard === guard && w.resource === resource && w.key === key && w.version === version,
        );
        if (write)
          violations.push({
            kind: 'lost_write',
            write,
            why: `the store holds version ${actual ?? 'none'} at the end, not ${version}`,
          });
      }
    }
  });

  for (const { before, after } of history.reshares ?? []) {
    const why =
      after.idHex !== before.idHex
        ? `cluster id ${after.idHex.slice(0, 16)}… after, ${before.idHex.slice(0, 16)}… before`
        : toHex(after.groupPublicKey.bytes) !== toHex(before.groupPublicKey.bytes)
          ? 'the group public key changed'
          : after.membershipVersion <= before.membershipVersion
            ? `membership ${after.membershipVersion} is not above ${before.membershipVersion}`
            : undefined;
    if (why) violations.push({ kind: 'cluster_changed', membership: after.membershipVersion, why });
  }

  // Across a reshare: per resource, each generation's tokens lie above every earlier generation's.
  const byResource = new Map<string, Map<number, GenerationToken[]>>();
  for (const [text, generation] of history.tokenGenerations ?? []) {
    const token = verify(text);
    if (!token.valid) continue;
    const generations = byResource.get(token.resource) ?? new Map<number, GenerationToken[]>();
    byResource.set(token.resource, generations);
    const list = generations.get(generation) ?? [];
    generations.set(generation, list);
    list.push({ generation, epoch: token.epoch, digest: token.digest });
  }
  const byEpoch = (a: GenerationToken, b: GenerationToken) => (BigInt(a.epoch) < BigInt(b.epoch) ? -1 : 1);
  for (const [resource, generations] of byResource) {
    const ordered = [...generations.keys()].sort((a, b) => a - b);
    for (const [k, earlierGeneration] of ordered.entries()) {
      const earlier = [...generations.get(earlierGeneration)!].sort(byEpoch).at(-1)!;
      for (const laterGeneration of ordered.slice(k + 1)) {
        const later = [...generations.get(laterGeneration)!].sort(byEpoch)[0]!;
        if (BigInt(later.epoch) < BigInt(earlier.epoch))
          violations.push({ kind: 'epoch_below_reshare', resource, earlier, later });
      }
    }
  }

  const stats = { entries, accepted, refusedByReason, tokensChecked: verified.size };
  return violations.length === 0 ? { ok: true, stats } : { ok: false, stats, violations };
}

function describeEntry(entry: GuardLogEntry): string {
  return `#${entry.seq} ${entry.op} ${JSON.stringify(entry.resource)}${entry.key !== null ? `/${entry.key}` : ''} epoch ${entry.epoch ?? '-'} ${entry.outcome} token ${entry.tokenDigest?.slice(0, 12) ?? '-'} holder ${entry.holder?.slice(0, 12) ?? '-'}`;
}

function describeSighting(seen: Sighting): string {
  return 'entry' in seen ? `guard ${seen.guard} log ${describeEntry(seen.entry)}` : `captured token #${seen.captured}`;
}

/** The minimal piece of history that shows a violation, as lines for a person. */
export function formatViolation(violation: Violation): string {
  switch (violation.kind) {
    case 'epoch_went_down':
      return [
        `epoch went down for ${JSON.stringify(violation.resource)} at guard ${violation.guard}:`,
        `  ${describeEntry(violation.earlier)}`,
        `  ${describeEntry(violation.later)}`,
      ].join('\n');
    case 'duplicate_token':
      return [
        `two valid tokens for ${JSON.stringify(violation.resource)} epoch ${violation.epoch} (more than f replicas signed twice):`,
        `  ${violation.first.digest.slice(0, 16)}… seen at ${describeSighting(violation.first.seen)}`,
        `  ${violation.second.digest.slice(0, 16)}… seen at ${describeSighting(violation.second.seen)}`,
      ].join('\n');
    case 'invalid_token':
      return `guard ${violation.guard} accepted an invalid token (${violation.why}):\n  ${describeEntry(violation.entry)}`;
    case 'unverified_token':
      return `a client obtained a token that does not verify (${violation.why}): captured token #${violation.captured}`;
    case 'cluster_changed':
      return `membership ${violation.membership} is not the same cluster continued: ${violation.why}`;
    case 'epoch_below_reshare': {
      const show = (t: GenerationToken) => `generation ${t.generation} epoch ${t.epoch} token ${t.digest.slice(0, 12)}`;
      return [
        `an epoch of ${JSON.stringify(violation.resource)} was granted again after a reshare (the new set did not carry the old records):`,
        `  highest before: ${show(violation.earlier)}`,
        `  lower after:    ${show(violation.later)}`,
      ].join('\n');
    }
    case 'lost_write':
      return [
        `acknowledged write lost (${violation.why}):`,
        `  guard ${violation.write.guard} ${JSON.stringify(violation.write.resource)}/${violation.write.key} version ${violation.write.version} token ${violation.write.tokenDigest.slice(0, 12)}`,
        ...(violation.entry ? [`  ${describeEntry(violation.entry)}`] : []),
      ].join('\n');
  }
}
