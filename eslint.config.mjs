import js from '@eslint/js';
import importPlugin from 'eslint-plugin-import';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.local/**', 'coverage/**', 'reports/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', ignoreRestSiblings: true }],
    },
  },
  // The layout's rules: the product (src/) never imports a tool (tools/: the demo, the fault campaign, the
  // benches) or test code, and no module reaches itself through its imports (the plugin skips `import type`,
  // which leaves nothing at run time).
  {
    files: ['**/*.ts'],
    plugins: { import: importPlugin },
    settings: {
      'import/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import/resolver': { node: { extensions: ['.ts', '.js'] } },
    },
    rules: {
      'import/no-cycle': ['error', { ignoreExternal: true }],
      'import/no-restricted-paths': [
        'error',
        {
          zones: [
            { target: './src', from: './tools', message: 'the product never imports a tool (tools/: demo, fault campaign, benches)' },
            { target: './src', from: './test', message: 'the product never imports test code' },
            // The rooms in layers, each importing only rooms below it (docs/design.md, Layout): the order, then
            // the reservation, then the sale and the workflow with its activities, then the processes.
            {
              target: './src/order',
              from: ['./src/reservation', './src/sale', './src/workflows', './src/activities', './src/payments', './src/starter', './src/api', './src/worker', './src/cli', './src/consumers'],
              message: 'src/order is the bottom room: it imports no room above it',
            },
            {
              target: './src/reservation',
              from: ['./src/sale', './src/workflows', './src/activities', './src/payments', './src/starter', './src/api', './src/worker', './src/cli', './src/consumers'],
              message: 'src/reservation imports only src/order among the rooms',
            },
            {
              target: ['./src/sale', './src/workflows', './src/activities'],
              from: ['./src/payments', './src/starter', './src/api', './src/worker', './src/cli', './src/consumers'],
              message: 'the sale, the workflow and its activities import no client room (payments) or process room (starter, api, worker, cli, consumers)',
            },
            {
              target: './src/payments',
              from: ['./src/starter', './src/api', './src/worker', './src/cli', './src/consumers'],
              message: 'the payment client imports the order and the workflow definitions, no process room',
            },
          ],
        },
      ],
    },
  },
  // The suites import the product and test/support/, never a tool, but for the suites of the demo and of the fault
  // campaign themselves.
  {
    files: ['test/**/*.ts'],
    ignores: ['test/chaos.test.ts', 'test/chaos.unit.test.ts', 'test/demo.test.ts'],
    plugins: { import: importPlugin },
    rules: {
      'import/no-restricted-paths': ['error', { zones: [{ target: './test', from: './tools', message: 'a suite imports src/ and test/support/, not tools/' }] }],
    },
  },
  // Rooms small enough to read whole: no module of src over 250 lines, no function of src or tools over 80.
  {
    files: ['src/**/*.ts', 'src/**/*.js'],
    rules: { 'max-lines': ['error', { max: 250 }] },
  },
  {
    files: ['src/**/*.ts', 'src/**/*.js', 'tools/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 80 }] },
  },
  // CommonJS files (the Jest configs) load each other with require().
  {
    files: ['**/*.js', '**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { module: 'writable', require: 'readonly', process: 'readonly' } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  // The sale page's scripts run in the browser, as ES modules.
  { files: ['src/web/**/*.js'], languageOptions: { sourceType: 'module', globals: globals.browser } },
);
