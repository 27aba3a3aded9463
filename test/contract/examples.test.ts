// Every example the contracts give is one their schemas accept: checked with the generated validators (request
// bodies, path and query parameters, response bodies) and, where none is generated (webhook bodies, headers, the
// component schemas' own examples), with Ajv over the generated component schemas.
import { readFile } from 'node:fs/promises'
import type { ValidateFunction } from 'ajv'
import { Ajv2020 } from 'ajv/dist/2020.js'
import ajvFormats from 'ajv-formats'
import t, { type Test } from 'tap'
import { parse } from 'yaml'
import { responseValidators as operationsResponses } from '../../generated/operations/response-validator-lookup.js'
import { schemas as operationsSchemas } from '../../generated/operations/schemas.js'
import { operationValidators as operationsRequests } from '../../generated/operations/validators.js'
import { responseValidators } from '../../generated/response-validator-lookup.js'
import { schemas } from '../../generated/schemas.js'
import type { RequestValidators } from '../../generated/validators.js'
import { operationValidators } from '../../generated/validators.js'

type Node = Record<string, unknown>
interface Parameter { name: string, in: string, schema?: Node, example?: unknown }
interface Operation {
  operationId: string
  parameters?: Node[]
  requestBody?: Node
  responses?: Record<string, Node>
}

interface Contract {
  file: string
  requests: Readonly<Record<string, RequestValidators>>
  responses: Readonly<Record<string, Readonly<Record<string, ValidateFunction>>>>
  schemas: Record<string, object>
}

const contracts: Contract[] = [
  { file: 'openapi.yaml', requests: operationValidators, responses: responseValidators, schemas },
  { file: 'ops/openapi.yaml', requests: operationsRequests, responses: operationsResponses, schemas: operationsSchemas }
]

const isNode = (value: unknown): value is Node => typeof value === 'object' && value !== null && !Array.isArray(value)

/** The object a local `$ref` names, followed until it is not one. */
function resolved (document: Node, node: Node): Node {
  const ref = node.$ref
  if (typeof ref !== 'string') return node
  const target = ref.replace(/^#\//, '').split('/').reduce<unknown>((at, key) => isNode(at) ? at[key] : undefined, document)
  if (!isNode(target)) throw new Error(`${ref} names nothing`)
  return resolved(document, target)
}

/** A schema of the contract as the generated component schemas name theirs (`#/components/schemas/Item` → `Item`). */
const generatedForm = (schema: unknown): unknown => JSON.parse(JSON.stringify(schema).replaceAll('"#/components/schemas/', '"'))

function checked (t: Test, validate: ValidateFunction | undefined, example: unknown, where: string): void {
  if (validate === undefined) {
    t.fail(`${where}: no validator for it`)
    return
  }
  t.ok(validate(example), `${where}${validate(example) ? '' : `: ${JSON.stringify(validate.errors)}`}`)
}

for (const contract of contracts) {
  t.test(`${contract.file}: every example is one its schema accepts`, async (t) => {
    const document = parse(await readFile(contract.file, 'utf8')) as Node
    const ajv = new Ajv2020({ strict: false, allErrors: true })
    ajvFormats.default(ajv)
    ajv.addSchema(Object.values(contract.schemas))
    const compiled = (schema: unknown): ValidateFunction => ajv.compile(generatedForm(schema) as object)

    let bodiesWithExamples = 0
    const paths = (document.paths ?? {}) as Record<string, Node>
    const webhooks = (document.webhooks ?? {}) as Record<string, Node>
    for (const [path, pathItem] of [...Object.entries(paths), ...Object.entries(webhooks)]) {
      const isWebhook = path in webhooks
      for (const value of Object.values(pathItem)) {
        if (!isNode(value) || !('operationId' in value)) continue
        const operation = value as unknown as Operation
        const id = operation.operationId
        for (const parameterNode of [...(pathItem.parameters as Node[] | undefined) ?? [], ...operation.parameters ?? []]) {
          const parameter = resolved(document, parameterNode) as unknown as Parameter
          if (!('example' in parameter)) continue
          const where = `${id}: parameter ${parameter.name}`
          const generated = parameter.in === 'path' ? contract.requests[id]?.params : parameter.in === 'query' ? contract.requests[id]?.querystring : undefined
          if (!isWebhook && generated !== undefined) checked(t, generated, { [parameter.name]: parameter.example }, where)
          else checked(t, compiled(parameter.schema), parameter.example, where)
        }
        if (operation.requestBody !== undefined) {
          const content = resolved(document, operation.requestBody).content as Record<string, Node>
          const described = Object.values(content).filter((media) => 'example' in media)
          t.ok(described.length > 0, `${id}: its request body has an example`)
          bodiesWithExamples += described.length
          for (const media of described) {
            checked(t, isWebhook ? compiled(media.schema) : contract.requests[id]?.body, media.example, `${id}: request body`)
          }
        }
        for (const [status, responseNode] of Object.entries(operation.responses ?? {})) {
          const response = resolved(document, responseNode)
          // A webhook's responses are the receiver's: the contract asks nothing of their bodies.
          for (const [mediaType, media] of isWebhook ? [] : Object.entries((response.content ?? {}) as Record<string, Node>)) {
            if (!('example' in media)) continue
            // The generated response validators are for JSON bodies (the metrics' text has a schema of its own).
            const validate = mediaType.endsWith('json') ? contract.responses[id]?.[status] : compiled(media.schema)
            checked(t, validate, media.example, `${id}: ${status} ${mediaType} body`)
          }
          for (const [name, headerNode] of Object.entries((response.headers ?? {}) as Record<string, Node>)) {
            const header = resolved(document, headerNode)
            if ('example' in header) checked(t, compiled(header.schema), header.example, `${id}: ${status} header ${name}`)
          }
        }
      }
    }
    if (contract.file === 'openapi.yaml') t.ok(bodiesWithExamples > 0, 'the public contract has body examples to check')

    // Each component schema's own examples.
    for (const [name, schema] of Object.entries(contract.schemas)) {
      const listed = (schema as { examples?: unknown[] }).examples ?? []
      for (const example of listed) checked(t, ajv.getSchema(name), example, `schema ${name}: example ${JSON.stringify(example)}`)
    }
  })
}
