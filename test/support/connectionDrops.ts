/**
 * Connections dropped over and over, for the suites and the fault campaign: every connection of the service to
 * the given Redis nodes closed by Redis itself (`CLIENT KILL TYPE normal`), as a proxy restart or a network blip
 * does, so that replies of commands Redis ran are lost with them.
 */
import Redis from 'ioredis';

/** A running fault; stop() ends it and reports what it did. */
export interface DropLoop {
  stop(): Promise<{ kills: number; connectionsClosed: number }>;
}

/**
 * Closes every normal client connection of each node (its own connections excepted: SKIPME) every `everyMs`.
 * @param ports the nodes' loopback ports
 */
export function dropConnections(ports: number[], everyMs: number): DropLoop {
  const killers = ports.map((port) => new Redis({ host: '127.0.0.1', port, lazyConnect: false, maxRetriesPerRequest: 1 }));
  for (const k of killers) k.on('error', () => undefined);
  let kills = 0;
  let connectionsClosed = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const closed = await Promise.all(killers.map((k) => (k.client('KILL', 'TYPE', 'normal') as Promise<number>).catch(() => 0)));
      kills += 1;
      connectionsClosed += closed.reduce((a, b) => a + b, 0);
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      for (const k of killers) k.disconnect();
      return { kills, connectionsClosed };
    },
  };
}

