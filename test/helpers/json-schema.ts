/** A real JSON Schema validator for tests (ajv, a dev dependency), of the draft the schema names. */
import { createRequire } from 'node:module';

export interface SchemaError {
  /** JSON Pointer of the offending value (`/source/prot`). */
  readonly at: string;
  readonly message: string;
}

export type Validate = (schema: object, documents: readonly unknown[]) => SchemaError[][];

interface AjvError {
  readonly instancePath: string;
  readonly keyword: string;
  readonly message?: string;
  readonly params: Record<string, unknown>;
}
type Ajv = new (o: object) => { compile: (s: object) => { (d: unknown): boolean; errors?: AjvError[] | null } };

const require = createRequire(import.meta.url);
const draft7 = (require('ajv') as { default: Ajv }).default;
const draft2020 = (require('ajv/dist/2020') as { default: Ajv }).default;

const validate: Validate = (schema, documents) => {
  const Ajv = String((schema as { $schema?: string }).$schema).includes('2020-12') ? draft2020 : draft7;
  const check = new Ajv({ allErrors: true, strict: false, validateFormats: false }).compile(schema);
  // An `if`/`then` failure is reported twice: the error inside `then`, and a summary at the `if` (dropped here).
  const errors = (): SchemaError[] =>
    (check.errors ?? [])
      .filter((e) => e.keyword !== 'if')
      .map((e) => ({ at: e.instancePath || '/', message: `${e.message ?? ''} ${JSON.stringify(e.params)}` }));
  return documents.map((d) => (check(d) ? [] : errors()));
};

/** The validator, and its name for test titles. */
export const jsonSchemaValidator: { readonly name: string; readonly validate: Validate } | undefined = { name: 'ajv', validate };
