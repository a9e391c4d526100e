/**
 * Byzantine clients (docs/protocol.md, Faults): authenticated holders that ask for
 * what they must not get. At the replicas: epochs far above the watermark
 * (must be `too_far`, nothing recorded), releases and renewals of another
 * holder's lease (must be `not_holder`, nothing changes). At a guard: replayed
 * tokens, tampered tokens (every field), tokens of another cluster (all
 * refused, barrier and data unchanged).
 *
 * The replica side speaks the wire protocol directly (`RawReplicaSession`),
 * since the SDK would never send these requests.
 */
import { WebSocket } from 'ws';
import { QuorumFenceError } from '../common/errors.js';
import { fromBase64Url, toBase64Url } from '../common/bytes.js';
import { describeDealtKey, localEndpoints, parseCluster, type Cluster } from '../cluster/description.js';
import type { Identity } from '../client/index.js';
import { systemRandom } from '../crypto/random.js';
import { combinePartials, dealKey } from '../crypto/threshold.js';
import { decodeServerMessage, encodeMessage, parseOutcome } from '../protocol/codec.js';
import { authTranscript, type OutcomeByRequest, type Request, type ServerMessage } from '../protocol/messages.js';
import { encodeToken, tokenToText } from '../token/admission-token.js';
import { grantMessage, type Grant } from '../token/grant.js';

/** One answer should take milliseconds; 5 s tolerates a loaded machine. */
const DEFAULT_ANSWER_TIMEOUT_MS = 5_000;

type RequestBody = Request extends infer R ? (R extends Request ? Omit<R, 'id'> : never) : never;

/** One authenticated connection to one replica, speaking the protocol exactly as told. */
export class RawReplicaSession {
  readonly #socket: WebSocket;
  readonly #waiting = new Map<number, (message: ServerMessage) => void>();
  #nextId = 1;

  private constructor(socket: WebSocket) {
    this.#socket = socket;
  }

  /**
   * Connects to `url` (replica `index` of `cluster`) and authenticates as `identity`.
   * @throws QuorumFenceError CONNECTION_FAILED, UNAUTHENTICATED, TIMEOUT
   */
  static open(
    url: string,
    cluster: Cluster,
    index: number,
    identity: Identity,
    timeoutMs = DEFAULT_ANSWER_TIMEOUT_MS,
  ): Promise<RawReplicaSession> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url, { perMessageDeflate: false });
      const session = new RawReplicaSession(socket);
      const timer = setTimeout(() => {
        socket.terminate();
        reject(new QuorumFenceError('TIMEOUT', `no welcome from ${url} within ${timeoutMs} ms`));
      }, timeoutMs);
      let phase: 'challenge' | 'welcome' | 'ready' = 'challenge';
      socket.on('error', (error) => {
        clearTimeout(timer);
        if (phase !== 'ready') reject(new QuorumFenceError('CONNECTION_FAILED', `${url}: ${error.message}`));
      });
      socket.on('close', () => {
        clearTimeout(timer);
        if (phase !== 'ready') reject(new QuorumFenceError('CONNECTION_FAILED', `${url} closed during the handshake`));
        for (const waiter of session.#waiting.values())
          waiter({ type: 'error', code: 'INTERNAL', message: 'connection closed' });
        session.#waiting.clear();
      });
      socket.on('message', (data: Buffer) => {
        let message: ServerMessage;
        try {
          message = decodeServerMessage(new Uint8Array(data));
        } catch {
          socket.terminate();
          return;
        }
        if (phase === 'challenge' && message.type === 'challenge') {
          phase = 'welcome';
          const signature = identity.sign(authTranscript(message.nonce, cluster.id, index));
          socket.send(encodeMessage({ type: 'hello', id: 0, holder: identity.publicKey, signature }));
        } else if (phase === 'welcome') {
          clearTimeout(timer);
          if (message.type !== 'welcome') {
            socket.terminate();
            reject(new QuorumFenceError('UNAUTHENTICATED', `${url} refused the hello: ${message.type}`));
            return;
          }
          phase = 'ready';
          resolve(session);
        } else if ((message.type === 'reply' || message.type === 'error') && message.id !== undefined) {
          const waiter = session.#waiting.get(message.id);
          session.#waiting.delete(message.id);
          waiter?.(message);
        }
      });
    });
  }

  /**
   * Sends one request; resolves with the checked outcome, or `{ error }` for an error frame or a closed connection.
   * @throws QuorumFenceError TIMEOUT, PROTOCOL_ERROR (an outcome the codec refuses)
   */
  async request<K extends Request['type']>(
    body: RequestBody & { type: K },
    timeoutMs = DEFAULT_ANSWER_TIMEOUT_MS,
  ): Promise<{ outcome: OutcomeByRequest[K] } | { error: string }> {
    const id = this.#nextId++;
    const message = await new Promise<ServerMessage>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(id);
        reject(new QuorumFenceError('TIMEOUT', `no answer to ${body.type} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiting.set(id, (m) => {
        clearTimeout(timer);
        resolve(m);
      });
      this.#socket.send(encodeMessage({ ...body, id } as Request));
    });
    if (message.type !== 'reply')
      return { error: message.type === 'error' ? `${message.code}: ${message.message}` : message.type };
    return { outcome: parseOutcome(body.type, message.outcome) };
  }

  close(): void {
    this.#socket.close(1000);
    setTimeout(() => this.#socket.terminate(), 1_000).unref();
  }
}

/** One session per replica of `cluster` (endpoints as the description gives them); replicas that cannot be reached are skipped. */
export async function openSessions(cluster: Cluster, identity: Identity): Promise<Map<number, RawReplicaSession>> {
  const sessions = new Map<number, RawReplicaSession>();
  await Promise.all(
    cluster.replicas.map(async (replica) => {
      try {
        sessions.set(replica.index, await RawReplicaSession.open(replica.endpoint, cluster, replica.index, identity));
      } catch {
        // An unreachable replica is simply not attacked.
      }
    }),
  );
  return sessions;
}

/** Each replica's answer (its status string, or the error) to one request, by replica index. */
export type Answers = Map<number, string>;

/** Sends the same request to every session and collects the answers' statuses. */
export async function askAll(sessions: ReadonlyMap<number, RawReplicaSession>, body: RequestBody): Promise<Answers> {
  const answers: Answers = new Map();
  await Promise.all(
    [...sessions].map(async ([index, session]) => {
      try {
        const answer = await session.request(body);
        answers.set(index, 'outcome' in answer ? answer.outcome.status : `error ${answer.error}`);
      } catch (error) {
        answers.set(index, `error ${(error as Error).message}`);
      }
    }),
  );
  return answers;
}

/** A token changed in one place; every variant must be refused by any guard. */
export interface TamperedToken {
  /** What was changed (version, clusterId, epoch, resource, holder, signature, truncated, extended, ...). */
  readonly change: string;
  readonly token: string;
}

/**
 * Variants of a valid token, each changed in one field or one way (layout:
 * docs/protocol.md, Token). Pure; the original is not among them.
 */
export function tamperedTokens(tokenText: string): TamperedToken[] {
  const bytes = fromBase64Url(tokenText, 'token');
  const resourceLength = (bytes[41]! << 8) | bytes[42]!;
  const holderAt = 43 + resourceLength;
  const signatureAt = holderAt + 32;
  const flip = (change: string, at: number, mask = 0x01): TamperedToken => {
    const copy = bytes.slice();
    copy[at] = copy[at]! ^ mask;
    return { change, token: toBase64Url(copy) };
  };
  return [
    flip('version', 0, 0x02),
    flip('clusterId', 1 + 7),
    flip('epoch', 33 + 7),
    flip('epoch high bit', 33, 0x80),
    flip('resourceLength', 42),
    flip('resource', 43),
    flip('holder', holderAt + 5),
    flip('signature', signatureAt + 50),
    flip('signature flags', signatureAt, 0x20),
    { change: 'truncated', token: toBase64Url(bytes.subarray(0, bytes.length - 1)) },
    { change: 'extended', token: toBase64Url(Uint8Array.of(...bytes, 0)) },
    { change: 'not base64url', token: tokenText.slice(0, -2) + '*=' },
    { change: 'empty', token: '' },
  ];
}

/**
 * A valid token of a freshly dealt, unrelated cluster for the same grant
 * fields: it verifies under its own group key and must be refused
 * (`wrong_cluster`) everywhere else.
 */
export function foreignClusterToken(like: Cluster, fields: Omit<Grant, 'clusterId'>): string {
  const f = (like.n - 1) / 3;
  const key = dealKey(like.n, 2 * f + 1, systemRandom);
  const other = parseCluster(describeDealtKey(key, localEndpoints(like.n)), { backend: like.backend });
  const grant: Grant = { ...fields, clusterId: other.id };
  const partials = key.shares.slice(0, other.t).map((share) => ({
    index: share.index,
    signature: like.backend.sign(like.backend.secretKeyFromBytes(share.scaledSecretShare), grantMessage(grant)),
  }));
  const signature = combinePartials(like.backend, other.n, partials);
  if (!signature) throw new QuorumFenceError('INTERNAL', 'combined signature of a fresh cluster is the identity');
  return tokenToText(encodeToken(grant, signature));
}
