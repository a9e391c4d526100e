/**
 * Equivocation evidence as a JSON document anyone holding cluster.json can check (verifyEquivocation): the
 * console's downloads, and what clients may hand it (POST /api/evidence). Bytes are lowercase hex, epochs
 * decimal strings. Reading one back checks every field and then the two signatures, so a document the
 * console accepts convicts its replica; one it refuses changes nothing.
 */
import { verifyEquivocation, type Evidence } from '../client/evidence.js';
import type { Cluster } from '../cluster/description.js';
import { fromHex, toHex } from '../common/bytes.js';
import { QuorumFenceError } from '../common/errors.js';
import { grantMessage, makeGrant, type Grant } from '../token/grant.js';

export const EVIDENCE_FORMAT = 'quorumfence/equivocation/v1';

/** A partial signature is a G2 point: 96 bytes compressed. */
const PARTIAL_BYTES = 96;

interface GrantJson {
  readonly clusterId: string;
  readonly resource: string;
  readonly epoch: string;
  readonly holder: string;
}

export interface EquivocationJson {
  readonly format: typeof EVIDENCE_FORMAT;
  readonly replica: number;
  readonly observedAt: string;
  readonly grant: GrantJson;
  readonly partial: string;
  readonly conflicting: { readonly grant: GrantJson; readonly partial: string };
}

function grantJson(grant: Grant): GrantJson {
  return {
    clusterId: toHex(grant.clusterId),
    resource: grant.resource,
    epoch: grant.epoch.toString(),
    holder: toHex(grant.holder),
  };
}

/** The document for an equivocation item. @throws QuorumFenceError INVALID_ARGUMENT for another kind */
export function equivocationToJson(evidence: Evidence): EquivocationJson {
  if (evidence.kind !== 'equivocation' || !evidence.conflicting)
    throw new QuorumFenceError('INVALID_ARGUMENT', `only equivocation evidence is transferable, not ${evidence.kind}`);
  return {
    format: EVIDENCE_FORMAT,
    replica: evidence.replica,
    observedAt: evidence.observedAt,
    grant: grantJson(evidence.grant),
    partial: toHex(evidence.partial),
    conflicting: { grant: grantJson(evidence.conflicting.grant), partial: toHex(evidence.conflicting.partial) },
  };
}

function object(value: unknown, field: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new QuorumFenceError('INVALID_ARGUMENT', `"${field}" expected an object`, { field });
  return value as Record<string, unknown>;
}

function readGrant(value: unknown, field: string): Grant {
  const o = object(value, field);
  if (typeof o.epoch !== 'string' || !/^[1-9]\d{0,18}$/.test(o.epoch))
    throw new QuorumFenceError('INVALID_ARGUMENT', `"${field}.epoch" expected a decimal string`, { field });
  return makeGrant({
    clusterId: fromHex(o.clusterId, 32, `${field}.clusterId`),
    resource: o.resource,
    epoch: BigInt(o.epoch),
    holder: fromHex(o.holder, 32, `${field}.holder`),
  });
}

/**
 * Reads a document back and checks it against `cluster`.
 * @throws QuorumFenceError INVALID_ARGUMENT (wrong shape, or the signatures do not convict), BAD_ENCODING,
 *   BAD_LENGTH, EPOCH_OUT_OF_RANGE, RESOURCE_* (a malformed field)
 */
export function equivocationFromJson(value: unknown, cluster: Cluster): Evidence {
  const o = object(value, 'evidence');
  if (o.format !== EVIDENCE_FORMAT)
    throw new QuorumFenceError('INVALID_ARGUMENT', `"format" expected "${EVIDENCE_FORMAT}"`, { field: 'format' });
  if (typeof o.replica !== 'number' || !Number.isSafeInteger(o.replica) || o.replica < 1 || o.replica > cluster.n)
    throw new QuorumFenceError('INVALID_ARGUMENT', `"replica" expected an integer in 1..${cluster.n}`, {
      field: 'replica',
    });
  const grant = readGrant(o.grant, 'grant');
  const conflicting = object(o.conflicting, 'conflicting');
  const other = readGrant(conflicting.grant, 'conflicting.grant');
  const evidence: Evidence = {
    kind: 'equivocation',
    replica: o.replica,
    grant,
    grantMessage: grantMessage(grant),
    partial: fromHex(o.partial, PARTIAL_BYTES, 'partial'),
    conflicting: {
      grant: other,
      grantMessage: grantMessage(other),
      partial: fromHex(conflicting.partial, PARTIAL_BYTES, 'conflicting.partial'),
    },
    observedAt: typeof o.observedAt === 'string' ? o.observedAt.slice(0, 40) : new Date().toISOString(),
  };
  if (!verifyEquivocation(evidence, cluster))
    throw new QuorumFenceError(
      'INVALID_ARGUMENT',
      `the two signatures do not convict replica ${o.replica}: they must both verify under its key share, for one (resource, epoch) of this cluster and two holders`,
    );
  return evidence;
}

export const OBSERVATION_FORMAT = 'quorumfence/console-observation/v1';

/** Strings in an observation are cut to this length (a replica chooses much of what is observed). */
const MAX_OBSERVED_TEXT = 400;
/** Fields kept from what was observed. */
const MAX_OBSERVED_FIELDS = 16;

/**
 * What the console itself saw a replica do, as a document: the proofs of docs/console.md ("Why these rules") that are
 * not signatures (an impossible or falling epoch, two leases, a protocol break, an identity mismatch), and a partial
 * that fails its key share. Replicas do not sign their answers, so it convinces those who trust the console that
 * wrote it, unlike an equivocation document.
 */
export interface ObservationJson {
  readonly format: typeof OBSERVATION_FORMAT;
  readonly clusterId: string;
  readonly replica: number;
  readonly kind: string;
  readonly reason: string;
  readonly observedAt: string;
  /** What the replica said, as the console read it. */
  readonly observed: Readonly<Record<string, string>>;
  readonly note: string;
}

const OBSERVATION_NOTE =
  'What this operator console observed this replica answer. Replicas do not sign their answers, so this record ' +
  'convinces those who trust the console that kept it; an equivocation document convinces anyone holding cluster.json.';

function cut(text: string): string {
  return text.length > MAX_OBSERVED_TEXT ? `${text.slice(0, MAX_OBSERVED_TEXT)}…` : text;
}

export function observationToJson(fields: {
  readonly clusterId: string;
  readonly replica: number;
  readonly kind: string;
  readonly reason: string;
  readonly observedAt: string;
  readonly observed: Readonly<Record<string, string>>;
}): ObservationJson {
  return {
    format: OBSERVATION_FORMAT,
    clusterId: fields.clusterId,
    replica: fields.replica,
    kind: fields.kind,
    reason: cut(fields.reason),
    observedAt: fields.observedAt,
    observed: Object.fromEntries(
      Object.entries(fields.observed)
        .slice(0, MAX_OBSERVED_FIELDS)
        .map(([k, v]) => [k.slice(0, 40), cut(v)]),
    ),
    note: OBSERVATION_NOTE,
  };
}

/**
 * Reads an observation back (the console's own store, console-store.ts), field by field.
 * @throws QuorumFenceError INVALID_ARGUMENT naming the field
 */
export function observationFromJson(value: unknown, cluster: Cluster): ObservationJson {
  const o = object(value, 'observation');
  const text = (field: string): string => {
    const v = o[field];
    if (typeof v !== 'string')
      throw new QuorumFenceError('INVALID_ARGUMENT', `"${field}" expected a string`, { field });
    return v;
  };
  if (o.format !== OBSERVATION_FORMAT)
    throw new QuorumFenceError('INVALID_ARGUMENT', `"format" expected "${OBSERVATION_FORMAT}"`, { field: 'format' });
  if (text('clusterId') !== cluster.idHex)
    throw new QuorumFenceError('INVALID_ARGUMENT', 'the observation names another cluster', { field: 'clusterId' });
  if (typeof o.replica !== 'number' || !Number.isSafeInteger(o.replica) || o.replica < 1 || o.replica > cluster.n)
    throw new QuorumFenceError('INVALID_ARGUMENT', `"replica" expected an integer in 1..${cluster.n}`, {
      field: 'replica',
    });
  const observed = object(o.observed, 'observed');
  return observationToJson({
    clusterId: cluster.idHex,
    replica: o.replica,
    kind: text('kind'),
    reason: text('reason'),
    observedAt: text('observedAt'),
    observed: Object.fromEntries(Object.entries(observed).filter(([, v]) => typeof v === 'string')) as Record<
      string,
      string
    >,
  });
}
