// A KafkaJS client program of `make compat` (internal/compat), run with
// NODE_PATH pointing at a node_modules holding kafkajs 2.2.4:
//
//   node client.js produce BOOTSTRAP TOPIC COUNT KEYS
//   node client.js consume BOOTSTRAP TOPIC GROUP EXPECT
//
// produce: an idempotent producer (acks -1, one request in flight, as
// KafkaJS requires for idempotence); record i has key "k<i % KEYS>" and
// value "<key>-<i, 6 digits>", sent in batches of 20; each acknowledged
// record is printed as "ACK <partition> -1 <key> <value>" (KafkaJS answers a
// batch with one base offset per partition). Exit 0 only if all were
// acknowledged.
//
// consume: the seed's loop: consumer.run({eachBatch}) handles each record
// (prints "REC <partition> <offset> <key> <value>"), then commits what it
// handled (commitOffsets), until EXPECT records were handled or 90 s passed.
//
// admin: KafkaJS's admin client on GROUP's topic TOPIC (which must hold
// records): createTopics (TOPIC-admin, 2 partitions), describeConfigs,
// fetchTopicOffsets, describeGroups, listGroups, deleteTopicRecords
// (partition 0 up to offset 1), deleteTopics (TOPIC-admin); prints
// "ADMIN <step> ok" per step and exits 1 at the first that fails.
//
// COMPAT_DEBUG=1 logs at DEBUG to stderr: every request with its API
// version ("Request Produce(key: 0, version: 7)").
const { Kafka, logLevel, Partitioners } = require('kafkajs');

function value(keys, i) {
  const key = 'k' + (i % keys);
  return [key, key + '-' + String(i).padStart(6, '0')];
}

// json is JSON.stringify that writes BigInts (offsets) as strings.
const json = (v) => JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? x.toString() : x));

function kafka(bootstrap) {
  return new Kafka({
    clientId: 'compat-kafkajs',
    brokers: bootstrap.split(','),
    logLevel: process.env.COMPAT_DEBUG ? logLevel.DEBUG : logLevel.WARN,
    logCreator: () => ({ namespace, level, label, log }) => {
      const { message, ...extra } = log;
      process.stderr.write(`${label} [${namespace}] ${message} ${json(extra)}\n`);
    },
    retry: { retries: 10 },
  });
}

async function produce(bootstrap, topic, count, keys) {
  // The default partitioner of KafkaJS 2 (Java's murmur2), named so that
  // KafkaJS does not warn about its change from 1.x on every run.
  const producer = kafka(bootstrap).producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  let failed = 0;
  for (let i = 0; i < count; i += 20) {
    const batch = [];
    for (let j = i; j < Math.min(count, i + 20); j++) {
      const [key, val] = value(keys, j);
      batch.push({ key, value: val });
    }
    try {
      const md = await producer.send({ topic, acks: -1, messages: batch });
      // md names the partitions written; KafkaJS's default partitioner
      // is not exposed per message, so the partition stays unknown here.
      void md;
      for (const m of batch) console.log(`ACK -1 -1 ${m.key} ${m.value}`);
    } catch (e) {
      failed += batch.length;
      for (const m of batch) console.error(`ERR ${m.key} ${m.value} ${e}`);
      break; // the rest would fail the same way
    }
  }
  await producer.disconnect();
  return failed === 0 ? 0 : 1;
}

async function consume(bootstrap, topic, group, expect) {
  const consumer = kafka(bootstrap).consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  let n = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const timer = setTimeout(finish, 90000);
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      let last = null;
      for (const m of batch.messages) {
        if (!isRunning() || isStale()) break;
        console.log(`REC ${batch.partition} ${m.offset} ${m.key} ${m.value}`);
        resolveOffset(m.offset);
        last = m.offset;
        n++;
      }
      if (last !== null) {
        await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: (BigInt(last) + 1n).toString() }]);
      }
      await heartbeat();
      if (n >= expect) finish();
    },
  });
  await finished;
  clearTimeout(timer);
  await consumer.disconnect();
  return 0;
}

async function admin(bootstrap, topic, group) {
  const adm = kafka(bootstrap).admin();
  await adm.connect();
  const fresh = topic + '-admin';
  const steps = [
    ['createTopics', () => adm.createTopics({ waitForLeaders: true, topics: [{ topic: fresh, numPartitions: 2, replicationFactor: 3 }] })],
    ['describeConfigs', () => adm.describeConfigs({ includeSynonyms: false, resources: [{ type: 2, name: topic }] })],
    ['fetchTopicOffsets', () => adm.fetchTopicOffsets(topic)],
    ['describeGroups', () => adm.describeGroups([group])],
    ['listGroups', () => adm.listGroups()],
    ['deleteTopicRecords', () => adm.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '1' }] })],
    ['deleteTopics', () => adm.deleteTopics({ topics: [fresh] })],
  ];
  for (const [name, fn] of steps) {
    try {
      const r = await fn();
      console.log(`ADMIN ${name} ok ${json(r === undefined ? null : r).slice(0, 300)}`);
    } catch (e) {
      console.log(`ADMIN ${name} failed ${e}`);
      await adm.disconnect();
      return 1;
    }
  }
  await adm.disconnect();
  return 0;
}

async function main() {
  const [mode, bootstrap, topic, a, b] = process.argv.slice(2);
  if (mode === 'produce') return produce(bootstrap, topic, Number(a), Number(b));
  if (mode === 'consume') return consume(bootstrap, topic, a, Number(b));
  if (mode === 'admin') return admin(bootstrap, topic, a);
  console.error('usage: node client.js produce BOOTSTRAP TOPIC COUNT KEYS | consume BOOTSTRAP TOPIC GROUP EXPECT | admin BOOTSTRAP TOPIC GROUP');
  return 2;
}

main().then((code) => process.exit(code), (e) => { console.error(`client.js: ${e}`); process.exit(1); });
