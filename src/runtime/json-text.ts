// V8 says where most JSON syntax errors are, but around an unexpected token it quotes the text instead, and the
// text may be a secret (WEBHOOKS) or a password (SEED_FILE).
const END_OF_INPUT = 'Unexpected end of JSON input'

// Where JSON.parse stopped on `text`, when before its end: the position V8 states, or the last character of a
// text whose error it does not place.
function stoppedBeforeEnd (text: string): number | undefined {
  try {
    JSON.parse(text)
    return undefined
  } catch (error) {
    const { message } = error as Error
    if (message === END_OF_INPUT) return undefined
    const stated = /at position (\d+)/.exec(message)?.[1]
    const position = stated === undefined ? text.length - 1 : Number(stated)
    return position < text.length ? position : undefined
  }
}

/**
 * Parses `text` as JSON; when it is not, throws an error that says where (`at line 1, column 12`), never what the
 * text holds there. Where V8 does not say, the place is the shortest start of the text that fails before its end.
 */
export function parseJson (text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    let [fine, failing] = [0, text.length]
    while (failing - fine > 1) {
      const middle = (fine + failing) >>> 1
      if (stoppedBeforeEnd(text.slice(0, middle)) === undefined) fine = middle
      else failing = middle
    }
    const position = stoppedBeforeEnd(text.slice(0, failing)) ?? text.length
    const line = text.slice(0, position).split('\n').length
    const column = position - text.lastIndexOf('\n', position - 1)
    throw new SyntaxError(`is not valid JSON (at line ${line}, column ${column})`)
  }
}

/**
 * Whether the JSON `text` nests objects and arrays more than `levels` deep (a top-level object is one level), by its
 * brackets outside strings: read before it is parsed, so that no recursion over what it makes (JSON.stringify, a
 * validator) meets a depth that overflows the stack.
 */
export function nestedDeeperThan (text: string, levels: number): boolean {
  let depth = 0
  let inString = false
  for (let index = 0; index < text.length; index += 1) {
    const character = text.charCodeAt(index)
    if (inString) {
      if (character === BACKSLASH) index += 1
      else if (character === QUOTE) inString = false
    } else if (character === QUOTE) {
      inString = true
    } else if (character === OPEN_BRACE || character === OPEN_BRACKET) {
      depth += 1
      if (depth > levels) return true
    } else if (character === CLOSE_BRACE || character === CLOSE_BRACKET) {
      depth -= 1
    }
  }
  return false
}

const [BACKSLASH, QUOTE, OPEN_BRACE, OPEN_BRACKET, CLOSE_BRACE, CLOSE_BRACKET] = ['\\', '"', '{', '[', '}', ']'].map((character) => character.charCodeAt(0))
