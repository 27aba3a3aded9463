// An OpenTelemetry collector's trace receiver, for the tests: OTLP over HTTP (POST /v1/traces), in both of its
// encodings, protobuf and JSON, decoded here far enough to see each span's ids, name, kind and attributes.
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'

export type AttributeValue = string | number | boolean

export interface ReceivedSpan {
  readonly serviceName: AttributeValue | undefined
  readonly traceId: string
  readonly spanId: string
  /** Empty for a trace's root. */
  readonly parentSpanId: string
  readonly name: string
  /** OTLP's SpanKind: 2 server, 3 client. */
  readonly kind: number
  readonly attributes: Readonly<Record<string, AttributeValue>>
}

export interface Collector {
  /** What OTEL_EXPORTER_OTLP_ENDPOINT names. */
  readonly url: string
  readonly spans: ReceivedSpan[]
  /** The content types of the exports received. */
  readonly contentTypes: Set<string>
  stop: () => Promise<void>
}

// Protobuf's wire format: each field a varint key (number << 3 | wire type), then a varint, 8 or 4 bytes, or a
// length and that many bytes (strings, bytes and nested messages alike).
type WireValue = bigint | Uint8Array

function varint (buffer: Uint8Array, start: number): [bigint, number] {
  let value = 0n
  let shift = 0n
  let offset = start
  for (;;) {
    const byte = buffer[offset++]!
    value |= BigInt(byte & 0x7f) << shift
    if ((byte & 0x80) === 0) return [value, offset]
    shift += 7n
  }
}

function fields (buffer: Uint8Array): Array<[number, WireValue]> {
  const found: Array<[number, WireValue]> = []
  let offset = 0
  while (offset < buffer.length) {
    const [key, afterKey] = varint(buffer, offset)
    const field = Number(key >> 3n)
    const wireType = Number(key & 7n)
    if (wireType === 0) {
      const [value, next] = varint(buffer, afterKey)
      found.push([field, value])
      offset = next
    } else if (wireType === 2) {
      const [length, next] = varint(buffer, afterKey)
      offset = next + Number(length)
      found.push([field, buffer.subarray(next, offset)])
    } else {
      const size = wireType === 1 ? 8 : 4
      found.push([field, buffer.subarray(afterKey, afterKey + size)])
      offset = afterKey + size
    }
  }
  return found
}

const bytesOf = (value: WireValue): Uint8Array => value instanceof Uint8Array ? value : new Uint8Array()
const text = (value: WireValue): string => Buffer.from(bytesOf(value)).toString('utf8')
const hex = (value: WireValue): string => Buffer.from(bytesOf(value)).toString('hex')
const all = (message: Uint8Array, field: number): WireValue[] => fields(message).filter(([number]) => number === field).map(([, value]) => value)

// KeyValue { 1 key, 2 AnyValue { 1 string, 2 bool, 3 int, 4 double } }.
function protobufAttributes (keyValues: WireValue[]): Record<string, AttributeValue> {
  const attributes: Record<string, AttributeValue> = {}
  for (const keyValue of keyValues) {
    const [key] = all(bytesOf(keyValue), 1)
    const [value] = all(bytesOf(keyValue), 2)
    const [[kind, content] = [0, 0n]] = fields(bytesOf(value ?? new Uint8Array()))
    attributes[text(key ?? new Uint8Array())] = kind === 1 ? text(content) : kind === 2 ? content === 1n : kind === 3 ? Number(content) : Buffer.from(bytesOf(content)).readDoubleLE()
  }
  return attributes
}

// ExportTraceServiceRequest { 1 ResourceSpans { 1 Resource { 1 attributes }, 2 ScopeSpans { 2 Span } } }, and
// Span { 1 trace id, 2 span id, 4 parent span id, 5 name, 6 kind, 9 attributes }.
function fromProtobuf (body: Uint8Array): ReceivedSpan[] {
  return all(body, 1).flatMap((resourceSpans) => {
    const [resource] = all(bytesOf(resourceSpans), 1)
    const serviceName = protobufAttributes(all(bytesOf(resource ?? new Uint8Array()), 1))['service.name']
    return all(bytesOf(resourceSpans), 2).flatMap((scopeSpans) => all(bytesOf(scopeSpans), 2).map((span): ReceivedSpan => {
      const message = bytesOf(span)
      const one = (field: number): WireValue => all(message, field)[0] ?? new Uint8Array()
      return {
        serviceName,
        traceId: hex(one(1)),
        spanId: hex(one(2)),
        parentSpanId: hex(one(4)),
        name: text(one(5)),
        kind: Number(one(6)),
        attributes: protobufAttributes(all(message, 9))
      }
    }))
  })
}

interface JsonKeyValue { key: string, value: { stringValue?: string, boolValue?: boolean, intValue?: string | number, doubleValue?: number } }
interface JsonExport {
  resourceSpans: Array<{
    resource: { attributes: JsonKeyValue[] }
    scopeSpans: Array<{ spans: Array<{ traceId: string, spanId: string, parentSpanId?: string, name: string, kind: number, attributes: JsonKeyValue[] }> }>
  }>
}

const jsonAttributes = (keyValues: JsonKeyValue[]): Record<string, AttributeValue> => Object.fromEntries(keyValues.map(({ key, value }) =>
  [key, value.stringValue ?? value.boolValue ?? (value.intValue === undefined ? value.doubleValue ?? '' : Number(value.intValue))]))

// OTLP/JSON: the same messages, ids as hex strings.
function fromJson (body: string): ReceivedSpan[] {
  return (JSON.parse(body) as JsonExport).resourceSpans.flatMap(({ resource, scopeSpans }) => {
    const serviceName = jsonAttributes(resource.attributes)['service.name']
    return scopeSpans.flatMap(({ spans }) => spans.map((span): ReceivedSpan => ({
      serviceName,
      traceId: span.traceId,
      spanId: span.spanId,
      parentSpanId: span.parentSpanId ?? '',
      name: span.name,
      kind: span.kind,
      attributes: jsonAttributes(span.attributes)
    })))
  })
}

export async function startCollector (): Promise<Collector> {
  const spans: ReceivedSpan[] = []
  const contentTypes = new Set<string>()
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => { chunks.push(chunk) })
    request.on('end', () => {
      const contentType = request.headers['content-type'] ?? ''
      contentTypes.add(contentType)
      const body = Buffer.concat(chunks)
      if (request.url !== '/v1/traces') {
        response.writeHead(404).end()
        return
      }
      spans.push(...(contentType === 'application/json' ? fromJson(body.toString('utf8')) : fromProtobuf(body)))
      // An empty ExportTraceServiceResponse: every span accepted.
      if (contentType === 'application/json') response.writeHead(200, { 'content-type': 'application/json' }).end('{}')
      else response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    contentTypes,
    stop: async () => {
      server.closeAllConnections()
      server.close()
      await once(server, 'close')
    }
  }
}
