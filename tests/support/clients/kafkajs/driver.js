// A consumer-group member or a producer written with kafkajs, printing the JSON events of Apache Kafka's
// VerifiableConsumer/VerifiableProducer on stdout, for regroup's client matrix.
//
//   node driver.js consume --bootstrap 127.0.0.1:9092 --topic t --group g
//   node driver.js produce --bootstrap 127.0.0.1:9092 --topic t --rate 100
//
// A consumer commits after each batch; on SIGTERM it disconnects (leaving the group) and prints
// shutdown_complete. A producer sends until SIGTERM.
'use strict';

const { Kafka, logLevel } = require('kafkajs');

function args(argv) {
  const out = { mode: argv[0], sessionTimeout: 4000, heartbeatInterval: 500, rate: 100, name: 'kafkajs' };
  for (let i = 1; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    out[key] = argv[i + 1];
  }
  out.sessionTimeout = Number(out.sessionTimeout);
  out.heartbeatInterval = Number(out.heartbeatInterval);
  out.rate = Number(out.rate);
  return out;
}

function emit(name, fields) {
  process.stdout.write(JSON.stringify({ timestamp: Date.now(), name, ...(fields || {}) }) + '\n');
}

function toParts(assignment) {
  const out = [];
  for (const [topic, partitions] of Object.entries(assignment || {})) {
    for (const p of [...partitions].sort((a, b) => a - b)) out.push({ topic, partition: p });
  }
  return out;
}

const stderrLogger = () => ({ namespace, level, label, log }) => {
  process.stderr.write(`${label} [${namespace}] ${log.message}\n`);
};

async function consume(a) {
  const kafka = new Kafka({ clientId: a.name, brokers: [a.bootstrap], logLevel: logLevel.WARN, logCreator: stderrLogger });
  const consumer = kafka.consumer({
    groupId: a.group,
    sessionTimeout: a.sessionTimeout,
    heartbeatInterval: a.heartbeatInterval,
    rebalanceTimeout: 10000,
    maxWaitTimeInMs: 200,
  });
  let current = [];
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    if (current.length) emit('partitions_revoked', { partitions: current });
    current = toParts(e.payload.memberAssignment);
    emit('partitions_assigned', { partitions: current, generation: e.payload.generationId });
  });
  consumer.on(consumer.events.REBALANCING, () => {
    if (current.length) emit('partitions_revoked', { partitions: current });
    current = [];
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [a.topic], fromBeginning: true });
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await consumer.disconnect();
    emit('shutdown_complete');
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  emit('startup_complete');
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, isRunning, isStale }) => {
      if (!isRunning() || isStale() || batch.messages.length === 0) return;
      const offsets = batch.messages.map((m) => Number(m.offset));
      const min = Math.min(...offsets);
      const max = Math.max(...offsets);
      emit('records_consumed', {
        count: offsets.length,
        partitions: [{ topic: batch.topic, partition: batch.partition, count: offsets.length, minOffset: min, maxOffset: max }],
      });
      resolveOffset(String(max));
      const committed = [{ topic: batch.topic, partition: batch.partition, offset: String(max + 1) }];
      try {
        await consumer.commitOffsets(committed);
        emit('offsets_committed', { offsets: committed.map((c) => ({ ...c, offset: max + 1 })), success: true });
      } catch (err) {
        emit('offsets_committed', { offsets: committed.map((c) => ({ ...c, offset: max + 1 })), success: false, error: String(err) });
      }
    },
  });
}

async function produce(a) {
  const kafka = new Kafka({ clientId: a.name, brokers: [a.bootstrap], logLevel: logLevel.WARN, logCreator: stderrLogger });
  const producer = kafka.producer();
  await producer.connect();
  let stopping = false;
  process.on('SIGTERM', () => { stopping = true; });
  process.on('SIGINT', () => { stopping = true; });
  emit('startup_complete');
  const interval = 1000 / a.rate;
  const pending = [];
  for (let i = 0; !stopping; i++) {
    const v = String(i);
    pending.push(
      producer
        .send({ topic: a.topic, acks: -1, messages: [{ key: v, value: v }] })
        .then((md) => {
          for (const m of md) emit('producer_send_success', { topic: m.topicName, partition: m.partition, offset: Number(m.baseOffset), value: v });
        })
        .catch((err) => emit('producer_send_error', { error: String(err) })),
    );
    await new Promise((r) => setTimeout(r, interval));
  }
  await Promise.all(pending);
  await producer.disconnect();
  emit('shutdown_complete');
  process.exit(0);
}

const a = args(process.argv.slice(2));
(a.mode === 'consume' ? consume(a) : produce(a)).catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n');
  process.exit(1);
});
