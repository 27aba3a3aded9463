import type { FastifyRequest } from 'fastify'
import type { components } from '../../generated/openapi.js'
import { emailKey } from '../auth/email.js'
import type { Requester } from '../auth/passwords.js'
import type { TokenPair } from '../auth/tokens.js'
import { emailAlreadyRegistered, invalidCredentials, invalidRefreshToken, serviceUnavailable } from '../errors.js'
import { newUser } from '../domain/records.js'
import type { User } from '../domain/index.js'
import { OutcomeUnknownError, StoreUnavailableError, UserRemovedError } from '../store/store.js'
import type { Handler } from './handler.js'

type AuthResponse = components['schemas']['AuthResponse']

const authResponse = (user: User, tokens: TokenPair): AuthResponse => ({
  ...tokens,
  user: { id: user.id, email: user.email, firstName: user.firstName, lastName: user.lastName, role: user.role }
})

// The hashing queue serves client addresses in turn, and drops the work of a client that has hung up.
const requester = (request: FastifyRequest): Requester => ({ address: request.clientAddress, stillWanted: () => !request.raw.socket.destroyed })

// What a request does after its write is made: the store out of reach then is not "nothing was done" (503), which
// would be false, but the outcome a lost reply has (504), which the client resolves as the operation's docs say.
async function afterWrite<T> (step: Promise<T>, made: string): Promise<T> {
  return await step.catch((error: unknown) => {
    throw error instanceof StoreUnavailableError ? new OutcomeUnknownError(`${made}, and then: ${error.message}`, { cause: error }) : error
  })
}

// Tokens must never be kept by a cache between the service and the client (RFC 6749 §5.1).
const NO_STORE = { 'cache-control': 'no-store', pragma: 'no-cache' }

export const registerUser: Handler<'registerUser'> = async (request, reply) => {
  const { passwords, tokens, registrations } = request.server
  const { store } = request
  const key = emailKey(request.body.email)
  // Registrations of one email run one at a time in this process: those that find it in flight wait for its
  // outcome, rather than each hashing a password only to be refused.
  const user = await registrations.run(key, async () => {
    if (await store.users.findByEmailKey(key) !== undefined) throw emailAlreadyRegistered()
    return await store.users.add(newUser(request.body, key, await passwords.hash(request.body.password, requester(request)), store.now()))
  })
  // A registration of the same email on another instance may have won while this one was hashing.
  if (user === undefined) throw emailAlreadyRegistered()
  // A retry finds the email registered, and the client signs in. An account removed before its first session opened
  // leaves nothing behind: registering again is the way on.
  const session = await afterWrite(tokens.open(store, user.id), 'registered').catch((error: unknown) => {
    throw error instanceof UserRemovedError ? serviceUnavailable('The account was removed as it was registered; register again.') : error
  })
  return reply.headers(NO_STORE).code(201).send(authResponse(user, session))
}

export const loginUser: Handler<'loginUser'> = async (request, reply) => {
  const { passwords, tokens } = request.server
  const { store } = request
  const user = await store.users.findByEmailKey(emailKey(request.body.email))
  const passwordMatches = await passwords.verify(user?.passwordHash, request.body.password, requester(request))
  if (user === undefined || !passwordMatches) throw invalidCredentials()
  // An account removed while its password was checked has no credentials left.
  const session = await tokens.open(store, user.id).catch((error: unknown) => { throw error instanceof UserRemovedError ? invalidCredentials() : error })
  return reply.headers(NO_STORE).code(200).send(authResponse(user, session))
}

export const refreshTokens: Handler<'refreshTokens'> = async (request, reply) => {
  const { store } = request
  const refreshed = await request.server.tokens.refresh(store, request.body.refreshToken)
  // A retry within the reuse leeway gets a working pair again.
  const user = refreshed === undefined ? undefined : await afterWrite(store.users.get(refreshed.userId), 'the refresh token rotated')
  if (refreshed === undefined || user === undefined) throw invalidRefreshToken()
  return reply.headers(NO_STORE).code(200).send(authResponse(user, refreshed.tokens))
}

export const logoutUser: Handler<'logoutUser'> = async (request, reply) => {
  await request.server.tokens.close(request.store, request.user.sessionId)
  return reply.code(204).send()
}
