// Ports for the services and peers a test or a benchmark starts.
import { createServer } from 'node:net'

// Below Linux's ephemeral range (ip_local_port_range, 32768 and up by default): the kernel hands those to every
// outgoing connection and to listen(0), so a port found free there may be a client socket's by the time the process
// told of it listens. Ports here are taken only by a listen that names them.
const LOWEST = 20_000
const RANGE = 12_768

/** A port no one listens on now, for a process that must be told its port before it starts. */
export async function freePort (host = '127.0.0.1'): Promise<number> {
  for (;;) {
    const port = LOWEST + Math.floor(Math.random() * RANGE)
    const server = createServer()
    const listening = await new Promise<boolean>((resolve) => {
      server.once('error', () => { resolve(false) })
      server.listen(port, host, () => { resolve(true) })
    })
    if (listening) {
      await new Promise((resolve) => server.close(resolve))
      return port
    }
  }
}
