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
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
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
          ],
        },
      ],
    },
  },
  { files: ['**/*.js', '**/*.cjs'], languageOptions: { sourceType: 'commonjs', globals: { module: 'writable', require: 'readonly', process: 'readonly' } } },
  // The sale page's script runs in the browser, as a classic script.
  { files: ['src/web/**/*.js'], languageOptions: { sourceType: 'script', globals: globals.browser } },
);
