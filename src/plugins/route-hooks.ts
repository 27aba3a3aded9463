/** A route's hooks of one kind (none, one, or a list) with `added` after them: how plugins add to routes in onRoute. */
export const appendedHooks = <T>(existing: T | T[] | undefined, ...added: T[]): T[] =>
  [...(existing === undefined ? [] : [existing].flat() as T[]), ...added]

/** The contract's path template of a route (`/v1/items/{itemId}` for Fastify's `/v1/items/:itemId`): how metrics and traces name it. */
export const contractPath = (url: string): string => url.replace(/:(\w+)/g, '{$1}')
