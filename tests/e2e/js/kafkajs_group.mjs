// kafkajs consumer-group driver for tests/e2e/test_groups.py. Usage:
//   node kafkajs_group.mjs '{"brokers":["h:p"],"topic":"t","groupId":"g","members":2,
//                            "partitions":6,"expected":120,"timeoutMs":90000}'
// Starts `members` consumers in one group, waits until their assignments (GROUP_JOIN events)
// are non-empty, disjoint and cover every partition for 2 s, prints {"ready":true,...}; the
// test then produces `expected` records. Once that many arrived (plus 2 s to catch duplicates)
// it prints {"ok":true,"members":[{"assignment":[p...],"records":[[p,o]...]}...]}.
// On timeout: {"ok":false,...} with the state so far. Exit code 0 either way.
import { Kafka, logLevel } from 'kafkajs';

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const cmd = JSON.parse(process.argv[2]);

const kafka = new Kafka({
  clientId: 'ferry-e2e-kafkajs-group',
  brokers: cmd.brokers,
  logLevel: logLevel.WARN,
  connectionTimeout: 10000,
  requestTimeout: 30000,
  retry: { retries: 8, initialRetryTime: 200 },
});

const members = [];
for (let i = 0; i < cmd.members; i++) {
  const consumer = kafka.consumer({
    groupId: cmd.groupId,
    sessionTimeout: 6000,
    heartbeatInterval: 1000,
    rebalanceTimeout: 20000,
  });
  const m = { consumer, assignment: [], records: [], joins: 0, crashes: [] };
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    m.joins += 1;
    m.assignment = (e.payload.memberAssignment[cmd.topic] || []).slice().sort((a, b) => a - b);
  });
  consumer.on(consumer.events.CRASH, (e) => m.crashes.push(String(e.payload.error)));
  members.push(m);
}

function state() {
  return members.map((m) => ({
    assignment: m.assignment, records: m.records, joins: m.joins, crashes: m.crashes,
  }));
}

function covered() {
  const all = members.flatMap((m) => m.assignment);
  return members.every((m) => m.assignment.length > 0)
    && all.length === cmd.partitions && new Set(all).size === cmd.partitions;
}

const deadline = Date.now() + (cmd.timeoutMs ?? 90000);
try {
  for (const m of members) {
    await m.consumer.connect();
    await m.consumer.subscribe({ topic: cmd.topic, fromBeginning: true });
    await m.consumer.run({
      eachMessage: async ({ partition, message }) => {
        m.records.push([partition, Number(message.offset)]);
      },
    });
  }
  let since = null;
  while (Date.now() < deadline) {
    if (covered()) {
      since ??= Date.now();
      if (Date.now() - since >= 2000) break;
    } else {
      since = null;
    }
    await sleep(100);
  }
  if (!covered()) {
    out({ ok: false, error: 'group never stable', members: state() });
  } else {
    out({ ready: true, members: state() });
    const total = () => members.reduce((n, m) => n + m.records.length, 0);
    while (Date.now() < deadline && total() < cmd.expected) await sleep(100);
    await sleep(2000);
    out({ ok: total() >= cmd.expected, members: state() });
  }
} catch (e) {
  out({ ok: false, error: { name: e.name, type: e.type, code: e.code, message: e.message } });
} finally {
  await Promise.all(members.map((m) => m.consumer.disconnect().catch(() => {})));
}
process.exit(0);
