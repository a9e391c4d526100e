/** Which Host headers the console's page and API answer to (DNS rebinding: docs/console.md, "Where it listens"). */
import { describe, expect, it } from 'vitest';
import { allowedHostsFor } from '../../src/console/server.js';

describe('allowedHostsFor', () => {
  it('on a loopback address: its own loopback names only, whatever --allowed-host says', () => {
    const allowed = allowedHostsFor('127.0.0.1', 7460, ['evil.example:7460']);
    expect([...allowed!].sort()).toEqual(['127.0.0.1:7460', '[::1]:7460', 'localhost:7460']);
    expect(allowedHostsFor('::1', 7460, [])!.has('[::1]:7460')).toBe(true);
  });

  it('on another address: the names --allowed-host gives, or any when none is given', () => {
    expect([...allowedHostsFor('0.0.0.0', 7460, ['localhost:7460', '127.0.0.1:7460'])!]).toEqual([
      'localhost:7460',
      '127.0.0.1:7460',
    ]);
    expect(allowedHostsFor('0.0.0.0', 7460, [])).toBeUndefined();
  });
});
