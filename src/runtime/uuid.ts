import { randomFillSync } from 'node:crypto'

const IDS_PER_DRAW = 256
const HEX_DIGITS = Buffer.from('0123456789abcdef', 'latin1')
const UUID_LENGTH = 36

const randomBytes = Buffer.alloc(16 * IDS_PER_DRAW)
const text = Buffer.from('00000000-0000-0000-0000-000000000000', 'latin1')
let drawn = IDS_PER_DRAW

// Writes one byte as two hex digits at `offset` of the text.
function writeByte (offset: number, byte: number): void {
  text[offset] = HEX_DIGITS[byte >> 4]!
  text[offset + 1] = HEX_DIGITS[byte & 0x0f]!
}

/**
 * A random UUID (version 4, RFC 9562), like `crypto.randomUUID()`, from the same cryptographically secure source,
 * drawn 256 at a time as it does. Node's builds the text from 20 pieces joined one by one, which V8 copies again
 * into one string the first time the id is hashed, matched or written; this one is written into a buffer and made
 * a string in one copy. Kept over the built-in for the memory of every stored item: a stored id of Node's stays a
 * tree of concatenated strings until something flattens it, which more than doubles the heap an item takes in the
 * memory store; and for the instructions of every create (docs/performance.md has both measurements). Each byte is
 * written by a call of its own, cheaper than a loop over a table of offsets.
 */
export function randomUuid (): string {
  if (drawn === IDS_PER_DRAW) {
    randomFillSync(randomBytes)
    drawn = 0
  }
  const bytes = 16 * drawn
  drawn += 1
  // 8-4-4-4-12 hex digits; the version (4) in the high nibble of byte 6, the variant (binary 10) in the high bits
  // of byte 8.
  writeByte(0, randomBytes[bytes]!)
  writeByte(2, randomBytes[bytes + 1]!)
  writeByte(4, randomBytes[bytes + 2]!)
  writeByte(6, randomBytes[bytes + 3]!)
  writeByte(9, randomBytes[bytes + 4]!)
  writeByte(11, randomBytes[bytes + 5]!)
  writeByte(14, (randomBytes[bytes + 6]! & 0x0f) | 0x40)
  writeByte(16, randomBytes[bytes + 7]!)
  writeByte(19, (randomBytes[bytes + 8]! & 0x3f) | 0x80)
  writeByte(21, randomBytes[bytes + 9]!)
  writeByte(24, randomBytes[bytes + 10]!)
  writeByte(26, randomBytes[bytes + 11]!)
  writeByte(28, randomBytes[bytes + 12]!)
  writeByte(30, randomBytes[bytes + 13]!)
  writeByte(32, randomBytes[bytes + 14]!)
  writeByte(34, randomBytes[bytes + 15]!)
  return text.toString('latin1', 0, UUID_LENGTH)
}
