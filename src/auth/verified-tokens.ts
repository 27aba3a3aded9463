/**
 * The claims of recently verified access tokens, by the token itself (never by the header that carried it: one
 * token has many spellings, `Bearer` and any run of spaces, and each would be an entry of its own). A client sends
 * the same header with every request until its token expires, so from the second request on, checking it costs no
 * signature check and no parsing:
 * - on a keep-alive connection, a comparison with the header last verified on that connection (one per connection,
 *   forgotten with it);
 * - on another connection (a new one, or a balancer's that carries many clients), a map lookup by the token.
 *
 * The map is bounded in bytes: the caller refuses a token longer than `maxTokenLength` before it is verified, so
 * `maxBytes / maxTokenLength` tokens fill it, however they are spelled or sent.
 *
 * fast-jwt has a cache of its own, but it keys entries by the token's SHA-256, and on this service's hot path
 * that hash cost more than the HS256 check it saves. Keeping the tokens themselves exposes nothing new: whoever
 * can read this process's memory can read the signing secret too.
 */
import { FifoMap } from 'toad-cache'

const unexpired = (claims: { readonly exp: number }, nowMs: number): boolean => nowMs <= claims.exp * 1000

export class VerifiedTokens<Claims extends { readonly exp: number }> {
  /** Tokens the map holds at most, each of at most `maxTokenLength` characters (one byte each: base64url). */
  readonly capacity: number
  readonly #maxTokenLength: number
  // The oldest out first.
  readonly #claimsByToken: FifoMap<Claims>
  // Forgotten with the connection itself.
  readonly #lastByConnection = new WeakMap<object, { readonly header: string, readonly claims: Claims }>()

  constructor (bounds: { readonly maxBytes: number, readonly maxTokenLength: number }) {
    this.#maxTokenLength = bounds.maxTokenLength
    this.capacity = Math.max(1, Math.floor(bounds.maxBytes / bounds.maxTokenLength))
    this.#claimsByToken = new FifoMap(this.capacity)
  }

  /** The claims of the header last verified on this connection, if it is this one and has not expired since. */
  byConnection (header: string, connection: object, nowMs: number): Claims | undefined {
    const last = this.#lastByConnection.get(connection)
    return last?.header === header && unexpired(last.claims, nowMs) ? last.claims : undefined
  }

  /** The claims of a token verified before, unless they have expired since (as in fast-jwt, exp is inclusive). */
  get (token: string, header: string, connection: object, nowMs: number): Claims | undefined {
    const claims = this.#claimsByToken.get(token)
    if (claims === undefined) return undefined
    if (!unexpired(claims, nowMs)) {
      this.#claimsByToken.delete(token)
      return undefined
    }
    this.#lastByConnection.set(connection, { header, claims })
    return claims
  }

  /** Remembers a token that has just passed verification; the oldest entry makes room once full. */
  remember (token: string, header: string, connection: object, claims: Claims): void {
    if (token.length > this.#maxTokenLength) throw new RangeError(`a token of ${token.length} characters is longer than the ${this.#maxTokenLength} allowed`)
    this.#claimsByToken.set(token, claims)
    this.#lastByConnection.set(connection, { header, claims })
  }

  /** Tokens held now (the expired among them until they are next looked up or pushed out). */
  get size (): number {
    return this.#claimsByToken.size
  }
}
