// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['node_modules/**', 'coverage/**', 'dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  { languageOptions: { globals: globals.node } },
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-console': 'off',
      eqeqeq: ['error', 'always'],
    },
  },
  {
    // A function a reader can hold in view. Tests are exempt: a describe block is a list, not logic.
    files: ['src/**/*.ts', 'handlers/**/*.ts', 'jobs/**/*.ts', 'dev/**/*.ts', 'bench/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 60 }] },
  },
);
