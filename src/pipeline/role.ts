import type { onRequestHookHandler } from 'fastify'
import type { Role } from '../domain/index.js'
import { forbidden } from '../errors.js'
import type { StepFor } from './step.js'

/** The hook of an operation with `x-roles`: runs after authentication, before the body is read. */
export function requireRole (roles: readonly Role[]): onRequestHookHandler {
  return (request, _reply, done) => {
    done(roles.includes(request.user.role) ? undefined : forbidden(`This operation is open to ${roles.join(', ')} users only.`))
  }
}

/** The step of every operation open to some roles only (`x-roles`): 403 for the others. */
export const roleGuard: StepFor = (route) => route.roles.length === 0 ? undefined : { onRequest: [requireRole(route.roles)] }
