// Ports for the services and peers a test or a benchmark starts.
import { type AddressInfo, createServer } from 'node:net'

/** A port no one listens on now, for a process that must be told its port before it starts. */
export async function freePort (host = '127.0.0.1'): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, host, resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}
