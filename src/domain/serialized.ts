import fastJson, { type AnySchema, type Schema } from 'fast-json-stringify'
import type { components } from '../../generated/openapi.js'
import { schemas } from '../../generated/schemas.js'

type Schemas = components['schemas']
type Serializer = (value: unknown) => string
/** A contract's serializers, by response schema. */
export type ContractSerializer = (schema: AnySchema) => Serializer

/**
 * Fastify's own serializer (fast-json-stringify, with the contract's component schemas to resolve `$ref`s), compiling
 * each schema once per process rather than once per app (the route schemas are the generated module's objects,
 * shared by every app a process builds: a host that registers the service more than once, the tests), and only
 * when it first serializes: compiling every route's every status was most of what building the app cost at start,
 * for statuses a process may never send.
 */
export function contractSerializers (componentSchemas: Readonly<Record<string, { readonly $id: string }>>): ContractSerializer {
  // The generated schemas are `as const` (read-only arrays), which fast-json-stringify's types do not admit.
  const external = Object.fromEntries(Object.values(componentSchemas).map((schema) => [schema.$id, schema as Schema]))
  const serializers = new WeakMap<AnySchema, Serializer>()
  return (schema) => {
    let serializer = serializers.get(schema)
    if (serializer === undefined) {
      let compiled: Serializer | undefined
      serializer = (value) => {
        compiled ??= fastJson(schema, { schema: external })
        return compiled(value)
      }
      serializers.set(schema, serializer)
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

/** Where a stored item keeps its JSON text, and that text's length in UTF-8 bytes, which a page sums. */
export const TEXT: unique symbol = Symbol('text')
export const TEXT_BYTES: unique symbol = Symbol('text bytes')

type ItemFields = Schemas['Item']

/** An item as a store holds it: frozen, with its text, made once, when the item was written. */
export type StoredItem = Readonly<ItemFields> & {
  readonly [TEXT]: string & Serialized<ItemFields>
  readonly [TEXT_BYTES]: number
}

/**
 * The contract's Item as an item's text is framed (keptItemText): `id` first and `updatedAt` last, so that a
 * property the contract adds anywhere, after `updatedAt` too, keeps every read of a kept text on its fast path.
 * fast-json-stringify writes the required properties first, in the order the schema lists them, then the others:
 * `updatedAt` (always there) is listed last and left out of `required`. JSON gives the order of an object's members
 * no meaning.
 */
export function framedItemSchema<Item extends { readonly $id: string, readonly required: readonly string[], readonly properties: Readonly<Record<string, unknown>> }> (item: Item): Item {
  const { id, updatedAt, ...others } = item.properties
  return { ...item, $id: `Framed${item.$id}`, required: item.required.filter((name) => name !== 'updatedAt'), properties: { id, ...others, updatedAt } }
}

const itemSerializer = contractSerializer(framedItemSchema(schemas.Item))
const itemListSerializer = contractSerializer(schemas.ItemList)

// Copies the contract's Item properties from an item onto a stored one, in the contract's order: compiled from the
// contract's list of them, as Fastify's serializer and validators are compiled from their schemas, so that each
// property is a named store (a loop over the names would be keyed stores, several times as slow to make and spread).
// eslint-disable-next-line no-new-func -- its text is the contract's property names, each written as a JSON string
const copyItemFields = new Function('target', 'item', Object.keys(schemas.Item.properties)
  .map((name) => `if (item[${JSON.stringify(name)}] !== undefined) target[${JSON.stringify(name)}] = item[${JSON.stringify(name)}]`).join('\n')) as (target: object, item: ItemFields) => void

// The class's fields are the contract's Item, whatever properties it gives: the constructor copies them.
interface StoredItemRecord extends Readonly<ItemFields> {}

/**
 * Its fields in the contract's order, then its text: every stored item of the same properties has one hidden class,
 * with every field in the object itself (a spread gives objects of the same fields different classes; a property
 * added later goes to a store of its own). The text is in private fields, read through the prototype's getters: no
 * spread of an item, serializer or comparison of items meets it as a field of the item's (and a frozen item's may
 * still be set).
 */
class StoredItemRecord implements StoredItem {
  readonly #text: StoredItem[typeof TEXT]
  // Measured when a page first counts it (a write's own answer is measured by Fastify as it is sent); -1 until then.
  #bytes = -1

  constructor (item: ItemFields) {
    copyItemFields(this, item)
    this.#text = itemSerializer(this) as StoredItem[typeof TEXT]
  }

  get [TEXT] (): StoredItem[typeof TEXT] {
    return this.#text
  }

  get [TEXT_BYTES] (): number {
    if (this.#bytes < 0) this.#bytes = Buffer.byteLength(this.#text)
    return this.#bytes
  }
}

/** The item to store, with its text. */
export const storedItem = (item: ItemFields): StoredItem => Object.freeze(new StoredItemRecord(item))

/** An item as a read sends it: its text, that text's length in bytes, and the version its entity tag names. */
export interface ItemText {
  readonly [TEXT]: Serialized<ItemFields>
  readonly [TEXT_BYTES]: number
  readonly updatedAt: string
}

// The serializer writes an item's fields id first and updatedAt last (framedItemSchema), without spaces, and
// a quote inside a string always escaped: the last "updatedAt":" in an item's text begins its updatedAt, whose
// value (a timestamp) runs to the closing quote before the object's brace.
const ITEM_HEAD = Buffer.from('{"id":"')
const UPDATED_AT = Buffer.from('"updatedAt":"')
const QUOTE = 0x22
const CLOSING_BRACE = 0x7d

/**
 * An item's text as a store kept its bytes, sent as they are, its updatedAt cut from its end: no decoding, no
 * parse. The service keeps each item as the contract's serializer wrote it (as release 1.0.0 did, by
 * JSON.stringify of the same fields in the same order).
 */
class KeptItemText implements ItemText {
  readonly #bytes: Buffer
  readonly #updatedAtFrom: number

  constructor (bytes: Buffer, updatedAtFrom: number) {
    this.#bytes = bytes
    this.#updatedAtFrom = updatedAtFrom
  }

  get [TEXT] (): Serialized<ItemFields> {
    return this.#bytes as Serialized<ItemFields>
  }

  get [TEXT_BYTES] (): number {
    return this.#bytes.length
  }

  get updatedAt (): string {
    return this.#bytes.toString('latin1', this.#updatedAtFrom, this.#bytes.length - 2)
  }
}

/**
 * The item whose text a store kept, as a read sends it: the bytes themselves when they are framed as the
 * serializer frames an item; otherwise (a text some other program wrote) parsed, and written as the serializer
 * writes it.
 */
export function keptItemText (bytes: Buffer): ItemText {
  const updatedAtFrom = bytes.lastIndexOf(UPDATED_AT) + UPDATED_AT.length
  const framed = updatedAtFrom > UPDATED_AT.length && bytes.length > ITEM_HEAD.length &&
    bytes.compare(ITEM_HEAD, 0, ITEM_HEAD.length, 0, ITEM_HEAD.length) === 0 &&
    bytes.indexOf(QUOTE, updatedAtFrom) === bytes.length - 2 && bytes[bytes.length - 1] === CLOSING_BRACE
  return framed ? Object.freeze(new KeptItemText(bytes, updatedAtFrom)) : storedItem(JSON.parse(bytes.toString()) as ItemFields)
}

/** The fields of an item read as its text. */
export const itemFields = (item: ItemText): ItemFields => JSON.parse(item[TEXT].toString()) as ItemFields

// The list's text is the contract's ItemList with an empty page, its items written between these two halves.
const EMPTY_PAGE = '"data":[]'

/**
 * A page of items as the contract's ItemList, in one buffer: the items' texts as they were kept, between the halves
 * of the contract's own serialization of an empty page, its length the sum of theirs.
 */
export function serializedItemList (items: readonly ItemText[], pagination: Schemas['Pagination']): Buffer & Serialized<Schemas['ItemList']> {
  const frame = itemListSerializer({ data: [], pagination })
  const cut = frame.indexOf(EMPTY_PAGE) + EMPTY_PAGE.length - 1
  // The frame holds numbers and punctuation only: as many bytes as characters.
  let length = frame.length + Math.max(items.length - 1, 0)
  for (const item of items) length += item[TEXT_BYTES]
  const buffer = Buffer.allocUnsafe(length)
  let offset = buffer.write(frame, 0, cut, 'latin1')
  for (let index = 0; index < items.length; index += 1) {
    if (index > 0) buffer[offset++] = 0x2c
    const { [TEXT]: text, [TEXT_BYTES]: bytes } = items[index]!
    if (typeof text !== 'string') offset += text.copy(buffer, offset)
    // A text of as many bytes as characters is ASCII, which latin1 copies as it is.
    else offset += buffer.write(text, offset, bytes, bytes === text.length ? 'latin1' : 'utf8')
  }
  buffer.write(frame.slice(cut), offset, 'latin1')
  return buffer as Buffer & Serialized<Schemas['ItemList']>
}
