// The request and response validators, compiled ahead of time by Ajv, and the typed lookups of them.
import { Ajv2020, type Options as AjvOptions } from 'ajv/dist/2020.js'
import { _, type KeywordCxt } from 'ajv/dist/2020.js'
import type { KeywordErrorCxt } from 'ajv/dist/types/index.js'
import { usePattern } from 'ajv/dist/vocabularies/code.js'
import ajvStandalone from 'ajv/dist/standalone/index.js'
import ajvFormats from 'ajv-formats'
import { type GeneratedFile, isObject, type JsonObject } from './contract.js'
import type { RouteEntry } from './route-table.js'

const REQUEST_PARTS = ['body', 'params', 'querystring', 'headers'] as const

// Ajv's ESM output (code.esm) still loads its runtime helpers (ucs2length, the format regexps' helpers) with
// require(), which an ES module cannot call: those become imports. Each exported validator is given Ajv's
// ValidateFunction type, so the rest of the file, Ajv's own code, can stay unchecked.
function validatorModuleSource (banner: string, code: string): string {
  const modules = new Map<string, string>()
  const body = code
    .replace(/^"use strict";/, '')
    .replace(/require\("([^"]+)"\)/g, (_match, specifier: string) => {
      const name = modules.get(specifier) ?? `runtime${modules.size}`
      modules.set(specifier, name)
      return name
    })
    .replace(/^export const (\w+) = /gm, 'export const $1: ValidateFunction = ')
  const imports = [...modules].map(([specifier, name]) => `import ${name} from '${specifier}.js'`)
  return `${banner}// @ts-nocheck\nimport type { ValidateFunction } from 'ajv'\n${imports.join('\n')}\n${body}\n`
}

/**
 * Ajv coerces the parameter "Infinity" or "1e400" to a number that is not finite, and then skips every numeric
 * keyword (minimum, maximum) for it, so it would reach a handler. Every coerced numeric parameter is marked with
 * this keyword, which fails such a number.
 */
const FINITE_KEYWORD = {
  keyword: 'x-finite',
  schemaType: 'boolean',
  error: { message: 'must be a finite number' },
  code (cxt: KeywordCxt) { cxt.fail(_`typeof ${cxt.data} == "number" && !isFinite(${cxt.data})`) }
} as const

/**
 * Ajv coerces a parameter's text to a number as JavaScript's Number() reads it: "0x10", "1e2" and " 1" would pass
 * as 16, 100 and 1. A numeric parameter is written in decimal digits (with a sign, and a fraction where its type is
 * number): each parameters object names its numeric parameters under this keyword, which checks their text before
 * `properties` coerces it.
 */
const DECIMAL_KEYWORD = {
  keyword: 'x-decimal',
  type: 'object',
  schemaType: 'object',
  before: 'properties',
  error: { message: 'must be a number written in decimal digits', params: ({ params }: KeywordErrorCxt) => _`{property: ${params.property}}` },
  code (cxt: KeywordCxt) {
    for (const [name, type] of Object.entries(cxt.schema as Record<string, 'integer' | 'number'>)) {
      const value = _`${cxt.data}[${name}]`
      const decimal = usePattern(cxt, type === 'integer' ? '^[-+]?[0-9]+$' : '^[-+]?[0-9]+(\\.[0-9]+)?$')
      cxt.setParams({ property: name })
      // Text that is no number at all fails the type alone.
      cxt.fail(_`typeof ${value} == "string" && !isNaN(${value}) && !${decimal}.test(${value})`)
    }
  }
} as const

/**
 * A uuid has one value however it is written (RFC 9562: hex digits in either case; its URN, `urn:uuid:…`), but the
 * stores compare ids as strings. Every uuid a request carries (a parameter, or anywhere in a body, through the
 * component schemas it refers to) is marked with this keyword, which writes it back in the canonical form the
 * service hands out (lower case, no URN prefix) once its format has passed: a format that fails is a 400 whatever
 * this does.
 */
const CANONICAL_UUID_KEYWORD = {
  keyword: 'x-canonical-uuid',
  schemaType: 'boolean',
  modifying: true,
  code (cxt: KeywordCxt) {
    const { data, it } = cxt
    cxt.gen.if(_`typeof ${data} == "string" && ${data}.length >= 36 && ${it.parentData} !== undefined`, () => {
      cxt.gen.assign(_`${it.parentData}[${it.parentDataProperty}]`, _`${data}.slice(-36).toLowerCase()`)
    })
  }
} as const

/** Every uuid schema in `schema`, at any depth, marked to be made canonical as it is read. */
function withCanonicalUuids (schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withCanonicalUuids)
  if (!isObject(schema)) return schema
  const marked = Object.fromEntries(Object.entries(schema).map(([key, entry]) => [key, withCanonicalUuids(entry)]))
  return schema.type === 'string' && schema.format === 'uuid' ? { ...marked, 'x-canonical-uuid': true } : marked
}

// What a parameter's schema alone cannot say: numbers written in decimal, and finite (Ajv coerces them from text).
function withDecimalNumbers (parameters: JsonObject): JsonObject {
  const numeric = (schema: JsonObject): boolean => schema.type === 'integer' || schema.type === 'number'
  const entries = Object.entries(parameters.properties as Record<string, JsonObject>)
  const properties = Object.fromEntries(entries.map(([name, schema]) => [name, numeric(schema) ? { ...schema, 'x-finite': true } : schema]))
  const decimal = Object.fromEntries(entries.filter(([, schema]) => numeric(schema)).map(([name, schema]) => [name, schema.type]))
  return { ...parameters, properties, ...(Object.keys(decimal).length === 0 ? {} : { 'x-decimal': decimal }) }
}

/** The name under which a validator module exports the validator of one part of one operation. */
const exportName = (operationId: string, part: string): string => `${operationId}_${part}`

/**
 * One module of standalone validators compiled ahead of time, exported under the given names; the component
 * schemas they refer to are compiled once and shared.
 */
function validatorModule (banner: string, file: string, options: AjvOptions, components: Record<string, JsonObject>, schemas: Record<string, JsonObject>): GeneratedFile {
  const ajv = new Ajv2020({ ...options, allErrors: true, removeAdditional: false, strict: true, inlineRefs: false, code: { source: true, esm: true, lines: true } })
  ajvFormats.default(ajv)
  ajv.addKeyword(FINITE_KEYWORD)
  ajv.addKeyword(DECIMAL_KEYWORD)
  ajv.addKeyword(CANONICAL_UUID_KEYWORD)
  // An annotation for clients and the gate (an enum that may gain values); it validates nothing.
  ajv.addKeyword({ keyword: 'x-extensible-enum', schemaType: 'boolean' })
  ajv.addSchema(Object.values(components))
  for (const [name, schema] of Object.entries(schemas)) ajv.addSchema(schema, name)
  const exportNames = Object.fromEntries(Object.keys(schemas).map((name) => [name, name]))
  return { path: `${file}.ts`, contents: validatorModuleSource(banner, ajvStandalone.default(ajv, exportNames)) }
}

function requestSchemas (routes: RouteEntry[], parts: ReadonlyArray<typeof REQUEST_PARTS[number]>): Record<string, JsonObject> {
  return Object.fromEntries(routes.flatMap((route) => parts.flatMap((part) => {
    const schema = route.schema[part]
    if (schema === undefined) return []
    return [[exportName(route.operationId, part), withCanonicalUuids(part === 'body' ? schema : withDecimalNumbers(schema)) as JsonObject]]
  })))
}

export function validatorModules (banner: string, routes: RouteEntry[], components: Record<string, JsonObject>): GeneratedFile[] {
  const responses = Object.fromEntries(routes.flatMap((route) =>
    Object.entries(route.schema.response).map(([status, schema]) => [exportName(route.operationId, status), schema])))
  // Responses are checked as they are: only what a request carries is rewritten.
  const requestComponents = withCanonicalUuids(components) as Record<string, JsonObject>
  return [
    // Bodies are validated as sent; parameters arrive as strings and are coerced to their types.
    validatorModule(banner, 'request-body-validators', { coerceTypes: false, useDefaults: false }, requestComponents, requestSchemas(routes, ['body'])),
    validatorModule(banner, 'request-parameter-validators', { coerceTypes: true, useDefaults: true }, requestComponents, requestSchemas(routes, ['params', 'querystring', 'headers'])),
    // For the tests and CONTRACT_STRICT_RESPONSES: the body the contract allows for each status of each operation.
    validatorModule(banner, 'response-validators', { coerceTypes: false, useDefaults: false }, components, responses)
  ]
}

/** The typed lookup of the request validators: by operationId, then by request part. */
export function requestValidatorLookupModule (banner: string, routes: RouteEntry[]): string {
  const entry = (route: RouteEntry): string => {
    const parts = REQUEST_PARTS
      .filter((part) => route.schema[part] !== undefined)
      .map((part) => `${part}: ${part === 'body' ? 'bodies' : 'parameters'}.${exportName(route.operationId, part)}`)
    return parts.length === 0 ? `  ${route.operationId}: {}` : `  ${route.operationId}: {\n${parts.map((line) => `    ${line}`).join(',\n')}\n  }`
  }
  return `${banner}import type { ValidateFunction } from 'ajv'
import * as bodies from './request-body-validators.js'
import * as parameters from './request-parameter-validators.js'
import type { RouteOperationId } from './routes.js'

export interface RequestValidators {
  /** The request body, as sent. */
  readonly body?: ValidateFunction
  /** Path parameters: coerced from strings. */
  readonly params?: ValidateFunction
  /** Query parameters: coerced from strings, defaults filled in. */
  readonly querystring?: ValidateFunction
  /** Header parameters, by their lower-cased names. */
  readonly headers?: ValidateFunction
}

// Typed as written, so that an operation's parts are known: validators.createItem.body is a function, not maybe one.
export const validators = {
${routes.map(entry).join(',\n')}
} as const satisfies { readonly [Id in RouteOperationId]: RequestValidators }

/** The same lookup, with every operation typed alike: for code that looks an operation up by a variable id. */
export const operationValidators: { readonly [Id in RouteOperationId]: RequestValidators } = validators
`
}

/**
 * The lookup of the response validators, by operationId then status: a module of its own, loaded only by what
 * checks responses (CONTRACT_STRICT_RESPONSES and the tests), never by a production start.
 */
export function responseValidatorLookupModule (banner: string, routes: RouteEntry[]): string {
  const entry = (route: RouteEntry): string => {
    const statuses = Object.keys(route.schema.response).map((status) => `'${status}': responses.${exportName(route.operationId, status)}`)
    return `  ${route.operationId}: ${statuses.length === 0 ? '{}' : `{ ${statuses.join(', ')} }`}`
  }
  return `${banner}import type { ValidateFunction } from 'ajv'
import * as responses from './response-validators.js'
import type { RouteOperationId } from './routes.js'

/** The JSON body the contract allows, by operationId, then by status code. */
export const responseValidators: { readonly [Id in RouteOperationId]: { readonly [status: string]: ValidateFunction } } = {
${routes.map(entry).join(',\n')}
}
`
}
