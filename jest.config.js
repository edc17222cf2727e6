/** Jest: TypeScript through ts-jest; every suite talks to the real local stack (scripts/services.sh up). */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json', isolatedModules: true }] },
  testTimeout: 60000,
  // Temporal workers hold native handles; suites run one at a time so no two Workers share the process.
  maxWorkers: 1,
};
