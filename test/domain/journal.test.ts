// What a request leaves in its sandbox's journal, at its worst within the bound each entry is kept to.
import t from 'tap'
import { routes } from '../../generated/routes.js'
import { JOURNAL_ENTRY_BYTES, journalRecord } from '../../src/domain/journal.js'

t.test('an entry at its worst fits JOURNAL_ENTRY_BYTES: the longest request id, operation and Idempotency-Key, each character of them escaped or two bytes', async (t) => {
  const longestOperation = routes.map(({ operationId }) => operationId).reduce((longest, id) => id.length > longest.length ? id : longest)
  const worst = journalRecord({
    requestId: 'r'.repeat(128),
    operationId: longestOperation,
    status: 201,
    // A header's character past ASCII (obs-text, read as Latin-1) is two bytes of UTF-8; a quote, two characters of JSON.
    idempotencyKey: 'é'.repeat(200) + '"'.repeat(55),
    accountId: '00000000-0000-4000-8000-000000000000',
    now: Date.UTC(9999, 11, 31),
    caused: [{ id: '00000000-0000-4000-8000-000000000001', type: 'items.item.removed' }]
  })
  const bytes = Buffer.byteLength(JSON.stringify(worst))
  t.ok(bytes <= JOURNAL_ENTRY_BYTES, `${bytes} bytes`)
  t.same(journalRecord({ requestId: 'r', operationId: undefined, status: 400, idempotencyKey: 'k'.repeat(256), accountId: undefined, now: 0, caused: null }),
    { requestId: 'r', operationId: null, status: 400, idempotencyKey: null, accountId: null, time: '1970-01-01T00:00:00.000Z', events: [] }, 'a key longer than the contract admits is not kept')
})
