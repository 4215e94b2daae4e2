//! The configuration reference, generated from the declarations of every broker key
//! ([`BROKER_CONFIGS`]) and topic key ([`TOPIC_CONFIGS`]): `ferry config-reference` prints it and
//! `docs/configuration.md` holds it (a test keeps the two equal).

use crate::broker_config::BROKER_CONFIGS;
use crate::dynamic::is_dynamic;
use crate::topic_config::{Effect, TopicDefault, TOPIC_CONFIGS};

/// The configuration reference as Markdown tables (what `docs/configuration.md` holds;
/// `ferry config-reference` prints it).
pub fn reference_markdown() -> String {
    let mut out = String::new();
    out.push_str("## Broker keys\n\nKeys marked *dynamic* can also be changed at run time with AlterConfigs or IncrementalAlterConfigs on a BROKER resource (`kafka-configs.sh --alter --entity-type brokers --entity-name <id>`, or `--entity-default` for the whole cluster); such values are kept in the controller quorum's metadata and win over the file (per broker first, then the cluster default).\n\n| key | type | default | meaning |\n|---|---|---|---|\n");
    for d in BROKER_CONFIGS {
        let default = if d.default.is_empty() {
            "(empty)"
        } else {
            d.default
        };
        let dynamic = if is_dynamic(d.name) { " *dynamic*" } else { "" };
        out.push_str(&format!(
            "| `{}`{} | {} | `{}` | {} |\n",
            d.name,
            dynamic,
            d.ty.name(),
            default,
            d.doc
        ));
    }
    out.push_str("\n## Topic keys\n\nSet per topic with CreateTopics, AlterConfigs or IncrementalAlterConfigs (for example `kafka-configs.sh --alter --entity-type topics`). A topic without an override uses the broker key in the third column (the first of them set wins), or the fixed default shown there. Every key Kafka 4 defines for topics is accepted with Kafka's checks (INVALID_CONFIG with Kafka's message otherwise); keys marked *no effect* are stored and described but change nothing in ferry, and keys marked *removed in Kafka 4* are accepted from older tools and dropped.\n\n| key | type | broker default from | meaning |\n|---|---|---|---|\n");
    for t in TOPIC_CONFIGS {
        let from = match t.default {
            TopicDefault::Broker(synonyms) => synonyms
                .iter()
                .map(|s| format!("`{}`", s.key))
                .collect::<Vec<_>>()
                .join(", "),
            TopicDefault::Fixed("") => "none; (empty)".to_string(),
            TopicDefault::Fixed(v) => format!("none; `{v}`"),
        };
        let effect = match t.effect {
            Effect::Applied => "",
            Effect::Ignored => "*No effect in ferry.* ",
            Effect::Removed => "*Removed in Kafka 4.* ",
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {}{} |\n",
            t.name,
            t.ty.name(),
            from,
            effect,
            t.doc
        ));
    }
    out
}
