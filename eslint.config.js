// Lint with type information: the rules that matter most here are the async ones
// (a floating promise or a promise passed where a callback is expected breaks a
// "check, await, write" rule silently) and exhaustive switches over code unions.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', 'bench-results/**', '.quorumfence/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: {
      parserOptions: { project: './tsconfig.test.json', tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  {
    // The client's and the replica's decisions (issue 33): each function small enough to read and test whole.
    files: ['src/client/**/*.ts', 'src/replica/**/*.ts'],
    rules: { complexity: ['error', 15] },
  },
  {
    // The client's cores are run by the driver files, never the other way round (issue 44): no circle.
    files: ['src/client/core/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^\\.\\./(acquire|drive|lease-calls|client)\\.js$',
              message: 'a core must not import the files that drive it (src/client/README.md, "Cores and the driver")',
            },
          ],
        },
      ],
    },
  },
);
