/**
 * A real JSON Schema validator for tests, of the draft the schema names: ajv when it is installed, else Python's
 * `jsonschema` package.
 * Neither is a dependency of tidemark; a test that needs one skips when neither is there.
 */
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';

export interface SchemaError {
  /** JSON Pointer of the offending value (`/source/prot`). */
  readonly at: string;
  readonly message: string;
}

export type Validate = (schema: object, documents: readonly unknown[]) => SchemaError[][];

const PYTHON = `
import json, sys
from jsonschema import validators
schema, docs = json.load(sys.stdin)
cls = validators.validator_for(schema)
cls.check_schema(schema)
v = cls(schema)
print(json.dumps([[{"at": "/" + "/".join(str(p) for p in e.absolute_path), "message": e.message} for e in v.iter_errors(d)] for d in docs]))
`;

function ajv(): Validate | undefined {
  try {
    const require = createRequire(import.meta.url);
    type Ajv = new (o: object) => { compile: (s: object) => { (d: unknown): boolean; errors?: { instancePath: string; message?: string }[] | null } };
    const draft7 = (require('ajv') as { default: Ajv }).default;
    const draft2020 = (require('ajv/dist/2020') as { default: Ajv }).default;
    return (schema, documents) => {
      const Ajv = String((schema as { $schema?: string }).$schema).includes('2020-12') ? draft2020 : draft7;
      const check = new Ajv({ allErrors: true, strict: false, validateFormats: false }).compile(schema);
      return documents.map((d) => (check(d) ? [] : (check.errors ?? []).map((e) => ({ at: e.instancePath || '/', message: e.message ?? '' }))));
    };
  } catch {
    return undefined;
  }
}

function python(): Validate | undefined {
  try {
    execFileSync('python3', ['-c', 'import jsonschema'], { stdio: 'ignore' });
  } catch {
    return undefined;
  }
  return (schema, documents) => JSON.parse(execFileSync('python3', ['-c', PYTHON], { input: JSON.stringify([schema, documents]) }).toString()) as SchemaError[][];
}

/** The validator found, and its name for test titles. */
export const jsonSchemaValidator: { readonly name: string; readonly validate: Validate } | undefined = (() => {
  const a = ajv();
  if (a !== undefined) return { name: 'ajv', validate: a };
  const p = python();
  return p !== undefined ? { name: 'python jsonschema', validate: p } : undefined;
})();
