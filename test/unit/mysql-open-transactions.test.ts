import { describe, expect, it } from 'vitest';
import { oldestTransactionAge } from '../../src/sources/mysql/mysql-source.js';
import { standingMark } from '../../src/sources/server-source.js';

const status = (list: string) => `=====================================
TRANSACTIONS
------------
Trx id counter 10388
History list length 0
LIST OF TRANSACTIONS FOR EACH SESSION:
${list}--------
FILE I/O
--------
`;

describe('open transactions from SHOW ENGINE INNODB STATUS', () => {
  it('takes the oldest active transaction of another connection, skipping its own and those not started', () => {
    const text = status(`---TRANSACTION (0x7f8c141c2680), ACTIVE 9 sec
MariaDB thread id 12, OS thread handle 1402, query id 17601 127.0.0.1 root starting
---TRANSACTION 10387, ACTIVE 2 sec
1 lock struct(s), heap size 1128, 0 row lock(s), undo log entries 1
MariaDB thread id 13, OS thread handle 1403, query id 17599 127.0.0.1 root
---TRANSACTION 10390, ACTIVE (PREPARED) 5 sec
MySQL thread id 14, OS thread handle 1404, query id 17602 127.0.0.1 root
---TRANSACTION (0x7f8c141c3b80), not started
MariaDB thread id 15, OS thread handle 1405, query id 0 127.0.0.1 root
`);
    expect(oldestTransactionAge(text, '12')).toBe(5);
    expect(oldestTransactionAge(text, '99')).toBe(9);
  });

  it('says none when nothing is active, and unknown when the list is cut short or missing', () => {
    expect(oldestTransactionAge(status('---TRANSACTION (0x1), not started\nMariaDB thread id 15, OS thread handle 1\n'), '1')).toBeNull();
    expect(oldestTransactionAge(status('---TRANSACTION 5, ACTIVE 3 sec\nMariaDB thread id 2, OS\n... truncated...\n'), '1')).toBeUndefined();
    expect(oldestTransactionAge('no such section', '1')).toBeUndefined();
  });

  it('a read that cannot see open transactions keeps its mark where it began, or below every value on a first read', () => {
    const start = { type: 'timestamp', value: '2024-01-01 00:00:00.000000' } as const;
    expect(standingMark('timestamp', start)).toBe(start);
    expect(standingMark('timestamptz', undefined)).toEqual({ type: 'timestamptz', value: '1000-01-01T00:00:00.000000Z' });
    expect(standingMark('int64', undefined)).toEqual({ type: 'int64', value: '-9223372036854775808' });
    expect(standingMark('text', undefined)).toBeNull();
  });
});
