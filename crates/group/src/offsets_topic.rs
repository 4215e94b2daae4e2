//! Records of the internal topic `__consumer_offsets`, in Apache Kafka's own binary layout so
//! that tools which decode that topic read ferry's too.
//!
//! Keys: offset commit (version 1: group, topic, partition) and group metadata (version 2:
//! group). Values: offset commit (version 3: offset, leader epoch, metadata, commit timestamp)
//! and group metadata (version 3: protocol type, generation, protocol, leader, state timestamp,
//! members). A null value is a tombstone. Consumer groups of the KIP-848 protocol are kept as
//! one record per group under key version 1000, a layout of ferry's own (Kafka's tools skip
//! key versions they do not know): epochs, assignor, and each member's subscription, epochs and
//! current and target assignment. The topic is compacted: the latest record per key is
//! the state, so replaying a partition from its start rebuilds every group it holds.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Java's `String.hashCode`, which Kafka uses to map a group to a partition.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__consumer_offsets` partition that holds `group` (Kafka's `Utils.abs(hash) % n`).
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    (java_string_hash(group) & 0x7fff_ffff) % partitions.max(1)
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
    ConsumerGroup {
        group: String,
    },
}

impl RecordKey {
    pub fn group(&self) -> &str {
        match self {
            RecordKey::Offset { group, .. }
            | RecordKey::Group { group }
            | RecordKey::ConsumerGroup { group } => group,
        }
    }
}

pub const CONSUMER_GROUP_KEY_VERSION: i16 = 1000;

/// topic id → partitions
pub use crate::assignor::Assignment as TopicAssignment;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberValue {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    /// The member's regular-expression subscription (KIP-848), stored from value version 1.
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub assigned: TopicAssignment,
    pub target: TopicAssignment,
    /// Set for a member that speaks the classic protocol in a consumer group (stored from
    /// value version 2).
    pub classic: Option<ClassicMemberValue>,
}

/// What a classic-protocol member of a consumer group keeps beyond a consumer member (Kafka's
/// `ClassicMemberMetadata`): its own session timeout and the protocols it joined with, each
/// with its embedded consumer-protocol subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMemberValue {
    pub session_timeout_ms: i32,
    pub protocols: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupValue {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<ConsumerMemberValue>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub state_timestamp: i64,
    pub members: Vec<MemberValue>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordValue {
    Offset(OffsetValue),
    Group(GroupValue),
    ConsumerGroup(ConsumerGroupValue),
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("malformed __consumer_offsets record: {0}")]
pub struct DecodeError(pub String);

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

fn put_nullable_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => b.put_i16(-1),
    }
}

fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(v.len() as i32);
    b.put_slice(v);
}

struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize) -> Result<(), DecodeError> {
        if self.0.remaining() < n {
            Err(DecodeError(format!(
                "needs {n} more bytes, has {}",
                self.0.remaining()
            )))
        } else {
            Ok(())
        }
    }
    fn i16(&mut self) -> Result<i16, DecodeError> {
        self.need(2)?;
        Ok(self.0.get_i16())
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }
    fn nullable_str(&mut self) -> Result<Option<String>, DecodeError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        self.need(len as usize)?;
        let raw = self.0.split_to(len as usize);
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| DecodeError("string is not UTF-8".into()))
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        self.nullable_str()?
            .ok_or_else(|| DecodeError("null where a string is required".into()))
    }
    fn uuid(&mut self) -> Result<uuid::Uuid, DecodeError> {
        self.need(16)?;
        let mut raw = [0u8; 16];
        self.0.copy_to_slice(&mut raw);
        Ok(uuid::Uuid::from_bytes(raw))
    }
    fn assignment(&mut self) -> Result<TopicAssignment, DecodeError> {
        let mut out = TopicAssignment::new();
        for _ in 0..self.i32()?.max(0) {
            let t = self.uuid()?;
            let set = out.entry(t).or_default();
            for _ in 0..self.i32()?.max(0) {
                set.insert(self.i32()?);
            }
        }
        Ok(out)
    }
    /// A session timeout of -1 marks a member of the consumer protocol.
    fn classic_member(&mut self) -> Result<Option<ClassicMemberValue>, DecodeError> {
        let session_timeout_ms = self.i32()?;
        if session_timeout_ms < 0 {
            return Ok(None);
        }
        let mut protocols = Vec::new();
        for _ in 0..self.i32()?.max(0) {
            protocols.push((self.str()?, self.bytes()?));
        }
        Ok(Some(ClassicMemberValue {
            session_timeout_ms,
            protocols,
        }))
    }
    fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(Bytes::new());
        }
        self.need(len as usize)?;
        Ok(self.0.split_to(len as usize))
    }
}

pub fn encode_key(key: &RecordKey) -> Bytes {
    let mut b = BytesMut::new();
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition,
        } => {
            b.put_i16(1);
            put_str(&mut b, group);
            put_str(&mut b, topic);
            b.put_i32(*partition);
        }
        RecordKey::Group { group } => {
            b.put_i16(2);
            put_str(&mut b, group);
        }
        RecordKey::ConsumerGroup { group } => {
            b.put_i16(CONSUMER_GROUP_KEY_VERSION);
            put_str(&mut b, group);
        }
    }
    b.freeze()
}

fn put_assignment(b: &mut BytesMut, a: &TopicAssignment) {
    b.put_i32(a.len() as i32);
    for (t, ps) in a {
        b.put_slice(t.as_bytes());
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(*p);
        }
    }
}

pub fn decode_key(data: Bytes) -> Result<RecordKey, DecodeError> {
    let mut r = Reader(data);
    match r.i16()? {
        0 | 1 => Ok(RecordKey::Offset {
            group: r.str()?,
            topic: r.str()?,
            partition: r.i32()?,
        }),
        2 => Ok(RecordKey::Group { group: r.str()? }),
        CONSUMER_GROUP_KEY_VERSION => Ok(RecordKey::ConsumerGroup { group: r.str()? }),
        v => Err(DecodeError(format!("unknown key version {v}"))),
    }
}

pub fn encode_value(value: &RecordValue) -> Bytes {
    let mut b = BytesMut::new();
    match value {
        RecordValue::Offset(o) => {
            b.put_i16(3);
            b.put_i64(o.offset);
            b.put_i32(o.leader_epoch);
            put_str(&mut b, &o.metadata);
            b.put_i64(o.commit_timestamp);
        }
        RecordValue::ConsumerGroup(g) => {
            b.put_i16(2);
            b.put_i32(g.group_epoch);
            b.put_i32(g.assignment_epoch);
            put_str(&mut b, &g.assignor);
            b.put_i32(g.members.len() as i32);
            for m in &g.members {
                put_str(&mut b, &m.member_id);
                put_nullable_str(&mut b, m.instance_id.as_deref());
                put_nullable_str(&mut b, m.rack.as_deref());
                put_str(&mut b, &m.client_id);
                put_str(&mut b, &m.client_host);
                b.put_i32(m.subscribed.len() as i32);
                for t in &m.subscribed {
                    put_str(&mut b, t);
                }
                put_nullable_str(&mut b, m.server_assignor.as_deref());
                b.put_i32(m.rebalance_timeout_ms);
                b.put_i32(m.epoch);
                b.put_i32(m.previous_epoch);
                put_assignment(&mut b, &m.assigned);
                put_assignment(&mut b, &m.target);
                put_nullable_str(&mut b, m.subscribed_regex.as_deref());
                match &m.classic {
                    None => b.put_i32(-1),
                    Some(c) => {
                        b.put_i32(c.session_timeout_ms.max(0));
                        b.put_i32(c.protocols.len() as i32);
                        for (name, metadata) in &c.protocols {
                            put_str(&mut b, name);
                            put_bytes(&mut b, metadata);
                        }
                    }
                }
            }
        }
        RecordValue::Group(g) => {
            b.put_i16(3);
            put_str(&mut b, &g.protocol_type);
            b.put_i32(g.generation);
            put_nullable_str(&mut b, g.protocol.as_deref());
            put_nullable_str(&mut b, g.leader.as_deref());
            b.put_i64(g.state_timestamp);
            b.put_i32(g.members.len() as i32);
            for m in &g.members {
                put_str(&mut b, &m.member_id);
                put_nullable_str(&mut b, m.group_instance_id.as_deref());
                put_str(&mut b, &m.client_id);
                put_str(&mut b, &m.client_host);
                b.put_i32(m.rebalance_timeout_ms);
                b.put_i32(m.session_timeout_ms);
                put_bytes(&mut b, &m.subscription);
                put_bytes(&mut b, &m.assignment);
            }
        }
    }
    b.freeze()
}

/// Decodes a value for `key`; the key says which kind of value it is.
pub fn decode_value(key: &RecordKey, data: Bytes) -> Result<RecordValue, DecodeError> {
    let mut r = Reader(data);
    let version = r.i16()?;
    match key {
        RecordKey::Offset { .. } => {
            if !(1..=3).contains(&version) {
                return Err(DecodeError(format!(
                    "unknown offset value version {version}"
                )));
            }
            let offset = r.i64()?;
            let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
            let metadata = r.str()?;
            let commit_timestamp = r.i64()?;
            if version == 1 {
                r.i64()?; // expire timestamp, unused since Kafka 2.1
            }
            Ok(RecordValue::Offset(OffsetValue {
                offset,
                leader_epoch,
                metadata,
                commit_timestamp,
            }))
        }
        RecordKey::ConsumerGroup { .. } => {
            if !(0..=2).contains(&version) {
                return Err(DecodeError(format!(
                    "unknown consumer group value version {version}"
                )));
            }
            let group_epoch = r.i32()?;
            let assignment_epoch = r.i32()?;
            let assignor = r.str()?;
            let mut members = Vec::new();
            for _ in 0..r.i32()?.max(0) {
                let member_id = r.str()?;
                let instance_id = r.nullable_str()?;
                let rack = r.nullable_str()?;
                let client_id = r.str()?;
                let client_host = r.str()?;
                let mut subscribed = Vec::new();
                for _ in 0..r.i32()?.max(0) {
                    subscribed.push(r.str()?);
                }
                members.push(ConsumerMemberValue {
                    member_id,
                    instance_id,
                    rack,
                    client_id,
                    client_host,
                    subscribed,
                    server_assignor: r.nullable_str()?,
                    rebalance_timeout_ms: r.i32()?,
                    epoch: r.i32()?,
                    previous_epoch: r.i32()?,
                    assigned: r.assignment()?,
                    target: r.assignment()?,
                    subscribed_regex: if version >= 1 {
                        r.nullable_str()?
                    } else {
                        None
                    },
                    classic: if version >= 2 {
                        r.classic_member()?
                    } else {
                        None
                    },
                });
            }
            Ok(RecordValue::ConsumerGroup(ConsumerGroupValue {
                group_epoch,
                assignment_epoch,
                assignor,
                members,
            }))
        }
        RecordKey::Group { .. } => {
            if !(0..=3).contains(&version) {
                return Err(DecodeError(format!(
                    "unknown group value version {version}"
                )));
            }
            let protocol_type = r.str()?;
            let generation = r.i32()?;
            let protocol = r.nullable_str()?;
            let leader = r.nullable_str()?;
            let state_timestamp = if version >= 2 { r.i64()? } else { -1 };
            let n = r.i32()?;
            let mut members = Vec::new();
            for _ in 0..n.max(0) {
                let member_id = r.str()?;
                let group_instance_id = if version >= 3 {
                    r.nullable_str()?
                } else {
                    None
                };
                let client_id = r.str()?;
                let client_host = r.str()?;
                let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { 0 };
                let session_timeout_ms = r.i32()?;
                let subscription = r.bytes()?;
                let assignment = r.bytes()?;
                members.push(MemberValue {
                    member_id,
                    group_instance_id,
                    client_id,
                    client_host,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    subscription,
                    assignment,
                });
            }
            Ok(RecordValue::Group(GroupValue {
                protocol_type,
                generation,
                protocol,
                leader,
                state_timestamp,
                members,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_follows_java_hash_code() {
        // Values computed with Java's "...".hashCode().
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("test-group"), 627_841_412);
        assert_eq!(partition_for("test-group", 50), 627_841_412 % 50);
        // A negative hash is masked, not negated, as Kafka's Utils.abs does.
        assert!(java_string_hash("zzzzzzzzzz") < 0);
        assert!((0..50).contains(&partition_for("zzzzzzzzzz", 50)));
    }

    #[test]
    fn keys_and_values_round_trip() {
        let k = RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 3,
        };
        assert_eq!(decode_key(encode_key(&k)).unwrap(), k);
        let v = RecordValue::Offset(OffsetValue {
            offset: 42,
            leader_epoch: 7,
            metadata: "meta".into(),
            commit_timestamp: 1_000,
        });
        assert_eq!(decode_value(&k, encode_value(&v)).unwrap(), v);

        let gk = RecordKey::Group { group: "g".into() };
        assert_eq!(decode_key(encode_key(&gk)).unwrap(), gk);
        let gv = RecordValue::Group(GroupValue {
            protocol_type: "consumer".into(),
            generation: 4,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            state_timestamp: 5,
            members: vec![MemberValue {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        });
        assert_eq!(decode_value(&gk, encode_value(&gv)).unwrap(), gv);

        let ck = RecordKey::ConsumerGroup { group: "cg".into() };
        assert_eq!(decode_key(encode_key(&ck)).unwrap(), ck);
        let mut assigned = TopicAssignment::new();
        assigned.insert(uuid::Uuid::from_u128(9), [0, 2].into_iter().collect());
        let cv = RecordValue::ConsumerGroup(ConsumerGroupValue {
            group_epoch: 5,
            assignment_epoch: 5,
            assignor: "uniform".into(),
            members: vec![ConsumerMemberValue {
                member_id: "m".into(),
                instance_id: None,
                rack: Some("az1".into()),
                client_id: "c".into(),
                client_host: "/1.2.3.4".into(),
                subscribed: vec!["t".into()],
                subscribed_regex: Some("^t.*".into()),
                server_assignor: None,
                rebalance_timeout_ms: 1000,
                epoch: 5,
                previous_epoch: 4,
                assigned: assigned.clone(),
                target: assigned.clone(),
                classic: None,
            }],
        });
        assert_eq!(decode_value(&ck, encode_value(&cv)).unwrap(), cv);
        // A member of the classic protocol keeps its session timeout and protocols.
        let RecordValue::ConsumerGroup(mut with_classic) = cv else {
            unreachable!()
        };
        let mut classic_member = with_classic.members[0].clone();
        classic_member.member_id = "k".into();
        classic_member.classic = Some(ClassicMemberValue {
            session_timeout_ms: 10_000,
            protocols: vec![
                ("range".into(), Bytes::from_static(b"sub-r")),
                ("roundrobin".into(), Bytes::from_static(b"sub-rr")),
            ],
        });
        with_classic.members.push(classic_member);
        let cv = RecordValue::ConsumerGroup(with_classic);
        assert_eq!(decode_value(&ck, encode_value(&cv)).unwrap(), cv);
    }

    #[test]
    fn truncated_or_unknown_records_are_errors() {
        assert!(decode_key(Bytes::from_static(&[0, 1, 0])).is_err());
        assert!(decode_key(Bytes::from_static(&[0, 9])).is_err());
        let k = RecordKey::Group { group: "g".into() };
        assert!(decode_value(&k, Bytes::from_static(&[0, 3, 0, 8, b'c'])).is_err());
    }
}
