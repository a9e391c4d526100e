/**
 * The client SDK's public surface (package entry `quorumfence/client`). Each
 * name is listed on purpose; internals (rounds, connections, the collector)
 * stay private to the folder.
 */
// The cluster description is what a client is created from, so its loaders are part of this entry point too.
export { loadClusterFile, parseCluster, type Cluster } from '../cluster/description.js';
// Following a reshare: a newer membership of the same cluster, endorsed by the group key (docs/resharing.md).
export {
  followMembership,
  endorsementVerifies,
  membershipDigest,
  type FollowOutcome,
  type MembershipRefusal,
} from '../cluster/membership.js';
export { QuorumFenceError, isQuorumFenceError, type ErrorCode } from '../common/errors.js';
export {
  QuorumFenceClient,
  type AcquireOptions,
  type AcquireResult,
  type ClientConstructionOptions,
  type ClientEvents,
  type ReplicaConnectionInfo,
} from './client.js';
export type { AcquireRefusal, AcquireRefusalReason } from './acquire.js';
export {
  Lease,
  type LeaseEnd,
  type LeaseEndReason,
  type LeaseEvents,
  type ReleaseOptions,
  type ReleaseSent,
} from './lease.js';
export type { RenewResult, ReleaseResult } from './lease-calls.js';
export type { ResourceStatus, ReplicaView } from './status.js';
export type { ReplicaLeases } from './active-leases.js';
export type { ActiveLease } from '../protocol/messages.js';
export { DEFAULT_CLIENT_OPTIONS, type ClientOptions } from './options.js';
export {
  EvidenceLog,
  verifyEquivocation,
  type Evidence,
  type EvidenceKind,
  type FaultKind,
  type ReplicaFault,
} from './evidence.js';
export {
  createIdentityFile,
  generateIdentity,
  identityFromSecretKey,
  loadIdentityFile,
  parseIdentity,
  IDENTITY_FORMAT,
  type Identity,
} from './identity.js';
export { withLock, type LockContext, type WithLockResult } from './with-lock.js';
export {
  campaign,
  Campaign,
  type CampaignEvents,
  type CampaignOptions,
  type CampaignStopReason,
  type Term,
} from './campaign.js';
export {
  runOnce,
  guardResultStore,
  RESULT_KEY,
  type KeyValueGuard,
  type OnceContext,
  type ResultStore,
  type ResultWrite,
  type RunOnceOptions,
  type RunOnceResult,
} from './run-once.js';
