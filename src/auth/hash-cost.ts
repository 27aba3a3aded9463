/** What hashing a new password costs: argon2id's memory and its passes over it (time cost), on one lane. */
export interface PasswordHashCost {
  readonly memoryKib: number
  readonly passes: number
}

/** OWASP's minimum for argon2id (Password Storage Cheat Sheet): the default, and the least production takes. */
export const OWASP_HASH_COST: PasswordHashCost = { memoryKib: 19456, passes: 2 }
