/** Postgres destination: its own schema per cell in the shared `test` database, dropped afterwards. */
import { canonicalRow, COLUMN_NAMES, type Canonical } from '../fixture.js';
import { MATRIX_PG_URL as URL, pgQuery as query } from '../pg.js';
import type { DestinationAdapter } from '../types.js';

export const postgresDestination: DestinationAdapter = {
  name: 'postgres',
  validate: () => undefined,
  async setup(ctx) {
    const schema = `mx_${ctx.uid}`;
    return {
      yaml: `destination:\n  type: postgres\n  url: ${JSON.stringify(URL)}\n  schema: ${schema}`,
      async rows(_pipeline, table): Promise<Canonical[]> {
        const exists = await query(`SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2`, [schema, table]);
        if (exists.length === 0) return [];
        const cols = COLUMN_NAMES.map((c) => `"${c}"::text AS "${c}"`).join(', ');
        return (await query(`SELECT ${cols} FROM "${schema}"."${table}"`)).map(canonicalRow);
      },
      async check(_pipeline, table) {
        const left = await query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND (table_name LIKE '\\_tidemark\\_build\\_%' OR table_name LIKE '%stage%')`, [schema]);
        if (left.length > 0) throw new Error(`leftover build/stage tables beside ${table}: ${left.map((r) => r.table_name).join(', ')}`);
      },
      async cleanup() {
        await query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      },
    };
  },
};
