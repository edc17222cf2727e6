/**
 * A TCP relay in front of a real server (Temporal, for the fault campaign and the tests), for faults the caller
 * controls: cut (open connections destroyed, new ones refused), restore (accepting again on the same port),
 * freeze (connections stay open and bytes are held, as from a server that stopped answering), thaw (the held
 * bytes go on), and latency (every chunk delayed, in both directions, order kept).
 */
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

export interface Relay {
  port: number;
  cut(): Promise<void>;
  restore(): Promise<void>;
  freeze(): void;
  thaw(): void;
  /** Delays every chunk by ms from now on (0: none). */
  delay(ms: number): void;
  close(): Promise<void>;
}

/** Listens on a free loopback port and relays each connection to host:port. */
export async function openRelay(host: string, port: number): Promise<Relay> {
  const relayed = new Set<Socket>();
  let frozen = false;
  let latencyMs = 0;
  const held: [Socket, Buffer][] = [];
  // A chunk delayed waits behind those before it on its socket, so a stream's bytes keep their order.
  const lastWrite = new Map<Socket, Promise<void>>();
  const write = (to: Socket, chunk: Buffer) => {
    if (!latencyMs) return void to.write(chunk);
    const ms = latencyMs;
    const after = (lastWrite.get(to) ?? Promise.resolve()).then(() => new Promise<void>((r) => setTimeout(r, ms).unref()));
    lastWrite.set(to, after);
    void after.then(() => !to.destroyed && to.write(chunk));
  };
  const forward = (from: Socket, to: Socket) =>
    from.on('data', (chunk: Buffer) => {
      if (frozen) held.push([to, chunk]);
      else write(to, chunk);
    });
  const listen = async (at: number): Promise<Server> => {
    const server = createServer((inbound) => {
      const outbound = connect(port, host);
      for (const socket of [inbound, outbound]) {
        relayed.add(socket);
        socket.on('close', () => {
          relayed.delete(socket);
          lastWrite.delete(socket);
        });
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
      for (const [to, chunk] of held.splice(0)) if (!to.destroyed) write(to, chunk);
    },
    delay(ms: number) {
      latencyMs = ms;
    },
    close: cut,
  };
}
