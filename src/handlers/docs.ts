import type { Handler } from './handler.js'

export const openDocs: Handler<'openDocs'> = async (_request, reply) => reply.redirect('/docs', 302)
