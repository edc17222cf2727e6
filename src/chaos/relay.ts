/**
 * A TCP relay in front of a real server (Temporal, in these suites), for faults a test controls: cut (open
 * connections destroyed, new ones refused), restore (accepting again on the same port), freeze (connections
 * stay open and bytes are held, as from a server that stopped answering), thaw (the held bytes go on).
 */
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

export interface Relay {
  port: number;
  cut(): Promise<void>;
  restore(): Promise<void>;
  freeze(): void;
  thaw(): void;
  close(): Promise<void>;
}

/** Listens on a free loopback port and relays each connection to host:port. */
export async function openRelay(host: string, port: number): Promise<Relay> {
  const relayed = new Set<Socket>();
  let frozen = false;
  const held: [Socket, Buffer][] = [];
  const forward = (from: Socket, to: Socket) =>
    from.on('data', (chunk: Buffer) => {
      if (frozen) held.push([to, chunk]);
      else to.write(chunk);
    });
  const listen = async (at: number): Promise<Server> => {
    const server = createServer((inbound) => {
      const outbound = connect(port, host);
      for (const socket of [inbound, outbound]) {
        relayed.add(socket);
        socket.on('close', () => relayed.delete(socket));
      }
      forward(inbound, outbound);
      forward(outbound, inbound);
      inbound.on('error', () => outbound.destroy()).on('close', () => outbound.destroy());
      outbound.on('error', () => inbound.destroy()).on('close', () => inbound.destroy());
    }).listen(at, '127.0.0.1');
    await once(server, 'listening');
    return server;
  };
  let server: Server | undefined = await listen(0);
  const relayPort = (server.address() as AddressInfo).port;
  const cut = async () => {
    const closing = server;
    server = undefined;
    for (const socket of relayed) socket.destroy();
    if (closing) await new Promise((resolve) => closing.close(resolve));
  };
  return {
    port: relayPort,
    cut,
    async restore() {
      server ??= await listen(relayPort);
    },
    freeze: () => void (frozen = true),
    thaw() {
      frozen = false;
      for (const [to, chunk] of held.splice(0)) if (!to.destroyed) to.write(chunk);
    },
    close: cut,
  };
}
