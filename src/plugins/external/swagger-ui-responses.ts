import type { FastifySwaggerUiConfigOptions } from '@fastify/swagger-ui'

// Swagger UI shows every response of an operation in full, with no option to fold them (swagger-ui#6630): an
// operation that lists a dozen error responses, each with its example and headers, reads as several screens. This
// Swagger UI plugin folds each error response to its status and description, and each response's headers to a
// line; a click opens either.
//
// It runs in the browser, and @fastify/swagger-ui serializes a `uiConfig` function by its source. The source is
// therefore plain JavaScript in a string, built into a function here: a function written in TypeScript would be
// serialized as its transpiler left it, and tsx (`npm run dev`) leaves calls to a helper of its own in it, which the
// page does not have.
const FOLDED_RESPONSES_SOURCE = String.raw`
  const h = system.React.createElement
  return {
    wrapComponents: {
      headers: (Original) => (props) => props.headers && props.headers.size > 0
        ? h('details', { className: 'folded-headers' },
          h('summary', null, 'Headers (' + props.headers.size + ')'),
          h(Original, props))
        : h(Original, props),
      response: (Original) => (props) => Number(props.code) < 400
        ? h(Original, props)
        : h('tr', { className: 'response folded-error', 'data-code': props.code },
          h('td', { className: 'response-col_status' }, props.code),
          h('td', { className: 'response-col_description', colSpan: 2 },
            h('details', null,
              h('summary', null, h(system.getComponent('Markdown', true), { source: props.response.get('description') })),
              h('table', { className: 'responses-table' },
                h('tbody', null, h(Original, { ...props, response: props.response.delete('description') }))))))
    }
  }
`

type SwaggerUiPlugin = NonNullable<FastifySwaggerUiConfigOptions['plugins']>[number]

// eslint-disable-next-line no-new-func -- its text is the constant above
export const foldedResponses = new Function('system', FOLDED_RESPONSES_SOURCE) as SwaggerUiPlugin

/** The folded rows' looks: a summary on the row's own line, and no second status or links cell inside it. */
export const FOLDED_RESPONSES_CSS = `
.folded-error summary, .folded-headers summary { cursor: pointer; }
.folded-error summary > div, .folded-error summary p { display: inline; }
.folded-error details .response-col_status, .folded-error details .response-col_links { display: none; }
.folded-error details .responses-table { margin-top: 0.5em; }
.folded-headers { margin-top: 0.5em; }
`
