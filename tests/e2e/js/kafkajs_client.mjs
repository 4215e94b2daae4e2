// kafkajs driver for ferry's e2e suites. Usage:
//   node kafkajs_client.mjs '<json command>'
// Commands (JSON object, field "op"):
//   {"op":"produce","brokers":["h:p"],"topic":"t","compression":"none|gzip","acks":-1,
//    "messages":[{"key":"k","value":"v","partition":0,"headers":{"h":"v"},"timestamp":"123"}]}
//     -> {"ok":true,"results":[{"topicName","partition","errorCode","baseOffset"}...]}
//   {"op":"admin","brokers":[...],"steps":[{"do":"createTopics","topics":[{"topic":"t","numPartitions":2,"configEntries":[{"name":"k","value":"v"}]}]},
//                                         {"do":"listTopics"},{"do":"fetchTopicOffsets","topic":"t"},
//                                         {"do":"fetchTopicMetadata","topics":["t"]},
//                                         {"do":"deleteTopics","topics":["t"]},
//                                         {"do":"alterPartitionReassignments","topics":[{"topic":"t","partitionAssignment":[{"partition":0,"replicas":[1,2]}]}]},
//                                         {"do":"listPartitionReassignments","topics":[{"topic":"t","partitions":[0]}]}]}
//     -> {"ok":true,"results":[<one result per step>]}
//   {"op":"transactions","brokers":[...],"transactionalId":"tx","topic":"t",
//    "transactions":[{"messages":[{"value":"v","partition":0}],"commit":true}]}
//     -> {"ok":true,"results":[true|false per transaction: committed]}
// Any command may carry "sasl": {"mechanism":"plain|scram-sha-256|scram-sha-512","username","password"}
// (or {"mechanism":"oauthbearer","token":"<JWT>"})
// and "ssl": {"ca":"<PEM file>"} (TLS verified against that CA).
// Errors: {"ok":false,"error":{"name","type","code","message"}} with exit code 0, so the test
// can assert on the error itself; exit code 2 only for bad usage.
import { readFileSync } from 'node:fs';
import { Kafka, CompressionTypes, logLevel } from 'kafkajs';

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

const cmd = JSON.parse(process.argv[2] || 'null');
if (!cmd || !cmd.op) {
  process.stderr.write('usage: node kafkajs_client.mjs <json>\n');
  process.exit(2);
}

// OAUTHBEARER takes a token provider; the test hands the token in as "token".
function saslOptions(sasl) {
  if (sasl.mechanism === 'oauthbearer') {
    return { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: sasl.token }) };
  }
  return sasl;
}

const kafka = new Kafka({
  clientId: 'ferry-e2e-kafkajs',
  brokers: cmd.brokers,
  logLevel: logLevel.WARN,
  connectionTimeout: 10000,
  requestTimeout: 30000,
  retry: { retries: cmd.retries ?? 5, initialRetryTime: 200 },
  ...(cmd.sasl ? { sasl: saslOptions(cmd.sasl) } : {}),
  ...(cmd.ssl ? { ssl: { ca: [readFileSync(cmd.ssl.ca, 'utf-8')] } } : {}),
});

const codecs = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP };

async function produce() {
  const producer = kafka.producer({ allowAutoTopicCreation: cmd.allowAutoTopicCreation ?? false });
  await producer.connect();
  try {
    const messages = cmd.messages.map((m) => {
      const msg = { key: m.key ?? null, value: m.value ?? null };
      if (m.partition !== undefined) msg.partition = m.partition;
      if (m.headers) msg.headers = m.headers;
      if (m.timestamp !== undefined) msg.timestamp = String(m.timestamp);
      return msg;
    });
    const results = await producer.send({
      topic: cmd.topic,
      messages,
      acks: cmd.acks ?? -1,
      compression: codecs[cmd.compression ?? 'none'],
    });
    return results;
  } finally {
    await producer.disconnect();
  }
}

async function admin() {
  const a = kafka.admin();
  await a.connect();
  const results = [];
  try {
    for (const step of cmd.steps) {
      switch (step.do) {
        case 'createTopics':
          results.push(await a.createTopics({ topics: step.topics, waitForLeaders: true }));
          break;
        case 'deleteTopics':
          await a.deleteTopics({ topics: step.topics });
          results.push(true);
          break;
        case 'listTopics':
          results.push(await a.listTopics());
          break;
        case 'fetchTopicOffsets':
          results.push(await a.fetchTopicOffsets(step.topic));
          break;
        case 'fetchTopicMetadata':
          results.push(await a.fetchTopicMetadata({ topics: step.topics }));
          break;
        case 'alterPartitionReassignments':
          await a.alterPartitionReassignments({ topics: step.topics, timeout: step.timeout });
          results.push(true);
          break;
        case 'listPartitionReassignments':
          results.push(await a.listPartitionReassignments({ topics: step.topics ?? null }));
          break;
        default:
          throw new Error(`unknown admin step ${step.do}`);
      }
    }
    return results;
  } finally {
    await a.disconnect();
  }
}

async function transactions() {
  const producer = kafka.producer({
    transactionalId: cmd.transactionalId,
    idempotent: true,
    maxInFlightRequests: 1,
  });
  await producer.connect();
  const results = [];
  try {
    for (const t of cmd.transactions) {
      const txn = await producer.transaction();
      await txn.send({ topic: cmd.topic, messages: t.messages, acks: -1 });
      if (t.commit) {
        await txn.commit();
      } else {
        await txn.abort();
      }
      results.push(t.commit);
    }
    return results;
  } finally {
    await producer.disconnect();
  }
}

try {
  const ops = { produce, admin, transactions };
  if (!ops[cmd.op]) throw new Error(`unknown op ${cmd.op}`);
  out({ ok: true, results: await ops[cmd.op]() });
} catch (e) {
  const error = { name: e.name, type: e.type, code: e.code, message: e.message };
  // An aggregate (alterPartitionReassignments, say) carries one error per failed item.
  if (Array.isArray(e.errors)) {
    error.errors = e.errors.map((x) => ({ name: x.name, type: x.type, code: x.code, message: x.message }));
  }
  out({ ok: false, error });
}
process.exit(0);
