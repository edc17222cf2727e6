/**
 * Jest: TypeScript through ts-jest; these suites talk to the real local stack (scripts/services.sh up). The fast
 * layer's `*.unit.test.ts` suites (no server) run under jest.unit.config.js, before these.
 */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  testPathIgnorePatterns: ['/node_modules/', '\\.unit\\.test\\.ts$'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }],
    // jose 6 ships only ES modules, which Jest's CommonJS runtime cannot require() before Node 24.9:
    // compile it to CommonJS like our own code.
    '^.+\\.js$': ['ts-jest', { tsconfig: { allowJs: true, module: 'commonjs', target: 'ES2022', isolatedModules: true } }],
  },
  transformIgnorePatterns: ['/node_modules/(?!jose/)'],
  testTimeout: 60000,
  // The suites' own database, Redis database, topic and namespace, never the user's (test/support/environment.ts).
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  setupFiles: ['<rootDir>/test/support/setup-env.ts'],
  // What the suites' clients print to the console (kafkajs reconnecting through a broker outage, the Temporal
  // worker's state changes) is captured, not printed, so a green run reads as one: TEST_VERBOSE=1 prints it.
  silent: process.env.TEST_VERBOSE !== '1',
  // Temporal workers hold native handles; suites run one at a time so no two Workers share the process.
  maxWorkers: 1,
};
