import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import ipaddr from 'ipaddr.js'

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Who the client is, for every per-address limit and turn: its IPv4 address (an IPv4-mapped IPv6 one
     * included), or the IPv6 network of `ipv6PrefixLength` bits it is in, since one host is given a whole /64.
     */
    readonly clientAddress: string
  }
}

interface ClientAddressPluginOptions {
  ipv6PrefixLength: number
}

/**
 * `address` as a rate-limit key: IPv4 as it is, IPv6 by its network (`2001:db8:1:2::/64`). undefined when it is no
 * address at all.
 */
export function addressKey (address: string, ipv6PrefixLength: number): string | undefined {
  if (!ipaddr.isValid(address)) return undefined
  const parsed = ipaddr.process(address)
  if (parsed.kind() === 'ipv4') return parsed.toString()
  const bytes = parsed.toByteArray().map((byte, index) => {
    const keptBits = Math.min(8, Math.max(0, ipv6PrefixLength - index * 8))
    return byte & (0xff00 >> keptBits)
  })
  return `${ipaddr.fromByteArray(bytes).toString()}/${ipv6PrefixLength}`
}

async function clientAddressPlugin (app: FastifyInstance, options: ClientAddressPluginOptions): Promise<void> {
  app.decorateRequest('clientAddress', {
    getter (this: FastifyRequest): string {
      // request.ip comes from X-Forwarded-For behind a trusted proxy; what is no address there is keyed by the peer.
      return addressKey(this.ip, options.ipv6PrefixLength) ?? addressKey(String(this.raw.socket.remoteAddress), options.ipv6PrefixLength) ?? this.ip
    }
  })
}

export default fp(clientAddressPlugin, { name: 'client-address' })
