/** A route's hooks of one kind (none, one, or a list) with `added` after them: how plugins add to routes in onRoute. */
export const appendedHooks = <T>(existing: T | T[] | undefined, ...added: T[]): T[] =>
  [...(existing === undefined ? [] : [existing].flat() as T[]), ...added]
