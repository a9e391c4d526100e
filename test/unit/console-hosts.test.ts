/** Which Host headers the console's page and API answer to (DNS rebinding: docs/console.md, "Where it listens"). */
import { describe, expect, it } from 'vitest';
import { allowedHostsFor, hostAllowed, isAddressHost } from '../../src/console/server.js';

describe('allowedHostsFor', () => {
  it('on a loopback address: its own loopback names, and the names --allowed-host adds (a scraper’s)', () => {
    expect([...allowedHostsFor('127.0.0.1', 7460, [])!].sort()).toEqual([
      '127.0.0.1:7460',
      '[::1]:7460',
      'localhost:7460',
    ]);
    const allowed = allowedHostsFor('127.0.0.1', 7460, ['console.monitoring:7460']);
    expect([...allowed!].sort()).toEqual(['127.0.0.1:7460', '[::1]:7460', 'console.monitoring:7460', 'localhost:7460']);
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

describe('hostAllowed (every path, /metrics included: issue 43)', () => {
  const loopback = allowedHostsFor('127.0.0.1', 7460, ['scraper.example:7460']);

  it('answers the allowed names and any IP address, which no rebinding page can read from', () => {
    for (const host of ['127.0.0.1:7460', 'localhost:7460', 'scraper.example:7460', '10.1.2.3:7460', '[fd00::5]:7460'])
      expect(hostAllowed(loopback, host), host).toBe(true);
    expect(isAddressHost('10.1.2.3')).toBe(true);
  });

  it('refuses another name, a missing Host, and what only looks like an address (negative case)', () => {
    for (const host of [
      'evil.example:7460',
      'localhost:7461',
      '127.0.0.1.evil.example:7460',
      '300.1.2.3:7460',
      '[beef]:1',
    ])
      expect(hostAllowed(loopback, host), host).toBe(false);
    expect(hostAllowed(loopback, undefined)).toBe(false);
    // No name given on a non-loopback address: any Host (the operator's proxy decides).
    expect(hostAllowed(allowedHostsFor('0.0.0.0', 7460, []), 'evil.example:7460')).toBe(true);
  });
});
