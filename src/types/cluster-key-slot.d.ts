/** The Redis Cluster slot of a key (CRC16 of its hash tag, mod 16384): the package ships no types. */
declare module 'cluster-key-slot' {
  export default function calculateSlot(key: string | Buffer): number;
}
