import fastJson, { type AnySchema, type Schema } from 'fast-json-stringify'
import type { components } from '../generated/openapi.js'
import { schemas } from '../generated/schemas.js'

type Schemas = components['schemas']
type Serializer = (value: unknown) => string

/**
 * Fastify's own serializer (fast-json-stringify, with the contract's component schemas to resolve `$ref`s), compiling
 * each schema once per process rather than once per app: the route schemas are the generated module's objects,
 * shared by every app a process builds (a host that registers the service more than once, the tests).
 */
export function contractSerializers (componentSchemas: Readonly<Record<string, { readonly $id: string }>>): (schema: AnySchema) => Serializer {
  // The generated schemas are `as const` (read-only arrays), which fast-json-stringify's types do not admit.
  const external = Object.fromEntries(Object.values(componentSchemas).map((schema) => [schema.$id, schema as Schema]))
  const compiled = new WeakMap<AnySchema, Serializer>()
  return (schema) => {
    let serializer = compiled.get(schema)
    if (serializer === undefined) {
      serializer = fastJson(schema, { schema: external })
      compiled.set(schema, serializer)
    }
    return serializer
  }
}

/** The public API's. */
export const contractSerializer = contractSerializers(schemas)

declare const serializedFrom: unique symbol

/**
 * The JSON text of a `T`, as the contract's serializer writes it, sent as it is (a handler's reply may be one where
 * the contract says `T`). Only this module makes one.
 */
export type Serialized<T> = (string | Buffer) & { readonly [serializedFrom]: T }

/** An item's JSON text and its length in UTF-8 bytes, which a page of items sums rather than measures. */
export interface ItemText {
  readonly json: string & Serialized<Schemas['Item']>
  readonly bytes: number
}

/** Where a stored item keeps its text: not enumerable, so no spread, copy or comparison of the item meets it. */
export const TEXT: unique symbol = Symbol('text')

/** An item as a store holds it: frozen, with its text, made once when the item was written. */
export type StoredItem = Readonly<Schemas['Item']> & { readonly [TEXT]: ItemText }

const itemSerializer = contractSerializer(schemas.Item)
const itemListSerializer = contractSerializer(schemas.ItemList)

/**
 * The item to store, with its text: its fields in the contract's order, built by one literal, so that every stored
 * item shares one hidden class (a spread gives objects of the same fields different ones).
 */
export function storedItem (item: Schemas['Item']): StoredItem {
  const record = {
    id: item.id,
    name: item.name,
    description: item.description,
    status: item.status,
    contributorId: item.contributorId,
    createdAt: item.createdAt,
    updatedAt: item.updatedAt
  }
  const json = itemSerializer(record) as ItemText['json']
  const text: ItemText = { json, bytes: Buffer.byteLength(json) }
  return Object.freeze(Object.defineProperty(record, TEXT, { value: text })) as StoredItem
}

// The list's text is the contract's ItemList with an empty page, its items written between these two halves.
const EMPTY_PAGE = '"data":[]'

/**
 * A page of items as the contract's ItemList, in one buffer: the items' texts as they were kept, between the halves
 * of the contract's own serialization of an empty page, its length the sum of theirs.
 */
export function serializedItemList (items: readonly StoredItem[], pagination: Schemas['Pagination']): Buffer & Serialized<Schemas['ItemList']> {
  const frame = itemListSerializer({ data: [], pagination })
  const cut = frame.indexOf(EMPTY_PAGE) + EMPTY_PAGE.length - 1
  // The frame holds numbers and punctuation only: as many bytes as characters.
  let length = frame.length + Math.max(items.length - 1, 0)
  for (const item of items) length += item[TEXT].bytes
  const buffer = Buffer.allocUnsafe(length)
  let offset = buffer.write(frame, 0, cut, 'latin1')
  for (let index = 0; index < items.length; index += 1) {
    if (index > 0) buffer[offset++] = 0x2c
    const { json, bytes } = items[index]![TEXT]
    // A text of as many bytes as characters is ASCII, which latin1 copies as it is.
    offset += buffer.write(json, offset, bytes, bytes === json.length ? 'latin1' : 'utf8')
  }
  buffer.write(frame.slice(cut), offset, 'latin1')
  return buffer as Buffer & Serialized<Schemas['ItemList']>
}
