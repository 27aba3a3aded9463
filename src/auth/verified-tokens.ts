/**
 * The claims of recently verified access tokens, by the exact text of the Authorization header that carried them.
 * A client sends the same header with every request until its token expires, so from the second request on,
 * checking it costs no signature check and no parsing:
 * - on a keep-alive connection, a comparison with the header last verified on that connection;
 * - on another connection (a new one, or a balancer's that carries many clients), a map lookup.
 *
 * fast-jwt has a cache of its own, but it keys entries by the token's SHA-256, and on this service's hot path
 * that hash cost more than the HS256 check it saves. Keeping the tokens themselves exposes nothing new: whoever
 * can read this process's memory can read the signing secret too.
 */
import { FifoMap } from 'toad-cache'

const unexpired = (claims: { readonly exp: number }, nowMs: number): boolean => nowMs <= claims.exp * 1000

export class VerifiedTokens<Claims extends { readonly exp: number }> {
  // The oldest out first.
  readonly #claimsByHeader: FifoMap<Claims>
  // Forgotten with the connection itself.
  readonly #lastByConnection = new WeakMap<object, { readonly header: string, readonly claims: Claims }>()

  constructor (capacity: number) {
    this.#claimsByHeader = new FifoMap(capacity)
  }

  /** The claims of a header verified before, unless they have expired since (as in fast-jwt, exp is inclusive). */
  get (header: string, connection: object, nowMs: number): Claims | undefined {
    const last = this.#lastByConnection.get(connection)
    if (last?.header === header && unexpired(last.claims, nowMs)) return last.claims
    const claims = this.#claimsByHeader.get(header)
    if (claims === undefined) return undefined
    if (!unexpired(claims, nowMs)) {
      this.#claimsByHeader.delete(header)
      return undefined
    }
    this.#lastByConnection.set(connection, { header, claims })
    return claims
  }

  /** Remembers a header whose token has just passed verification; the oldest entry makes room once full. */
  remember (header: string, connection: object, claims: Claims): void {
    this.#claimsByHeader.set(header, claims)
    this.#lastByConnection.set(connection, { header, claims })
  }
}
