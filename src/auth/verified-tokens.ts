/**
 * The claims of recently verified tokens, by the token's exact text. A client sends the same access token with
 * every request until it expires, so from the second request on a signature check becomes a map lookup.
 *
 * fast-jwt has a cache of its own, but it keys entries by the token's SHA-256, and on this service's hot path
 * that hash cost more than the HS256 check it saves. Keeping the tokens themselves exposes nothing new: whoever
 * can read this process's memory can read the signing secret too.
 */
export class VerifiedTokens<Claims extends { readonly exp: number }> {
  readonly #claimsByToken = new Map<string, Claims>()
  readonly #capacity: number

  constructor (capacity: number) {
    this.#capacity = capacity
  }

  /** The claims of a token verified before, unless it has expired since (same rule as fast-jwt: exp is inclusive). */
  get (token: string, nowMs: number): Claims | undefined {
    const claims = this.#claimsByToken.get(token)
    if (claims === undefined || nowMs <= claims.exp * 1000) return claims
    this.#claimsByToken.delete(token)
    return undefined
  }

  /** Remembers a token that has just passed verification; the oldest entry makes room once full. */
  remember (token: string, claims: Claims): void {
    if (this.#claimsByToken.size >= this.#capacity) {
      for (const oldest of this.#claimsByToken.keys()) {
        this.#claimsByToken.delete(oldest)
        break
      }
    }
    this.#claimsByToken.set(token, claims)
  }
}
