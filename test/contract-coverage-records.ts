// Where each test process records the operation/status pairs it saw (helper.ts), for test/contract-coverage.ts to
// read after the suite. A module of its own, so that the check after the suite loads nothing of the app.
export const CONTRACT_COVERAGE_DIR = '.tap/contract-coverage'
