//! The set of stored ACLs, indexed for the questions the authorizer asks.
//!
//! Layout: per resource type, one ordered map from literal name to its entries and one from
//! prefix to its entries. Finding the ACLs that apply to a resource costs one lookup for the
//! exact literal, one for the literal wildcard `*`, and a walk over the prefix map that visits
//! only prefixes of the name (see [`for_each_prefix_of`]); nothing scans all ACLs.
//!
//! Invariants: every stored binding passed [`AclBinding::check_storable`] (so each resource type
//! is concrete and each pattern LITERAL or PREFIXED); a binding is stored at most once (Kafka's
//! controller drops duplicate creations); no map holds an empty entry set; `len` is the number
//! of stored bindings. Iteration order is deterministic: resource type, literal before
//! prefixed, name, entry.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, ControlFlow};

use crate::binding::{
    AccessControlEntry, AclBinding, AclBindingFilter, ResourcePattern, WILDCARD_RESOURCE,
};
use crate::error::AclError;
use crate::types::{PatternType, ResourceType};

/// The entries stored under one resource pattern.
pub(crate) type Entries = BTreeSet<AccessControlEntry>;

/// The ACLs of one resource type.
#[derive(Clone, Debug, Default)]
pub(crate) struct TypeAcls {
    /// LITERAL patterns by name (including the wildcard `*`).
    pub(crate) literal: BTreeMap<String, Entries>,
    /// PREFIXED patterns by prefix.
    pub(crate) prefixed: BTreeMap<String, Entries>,
}

impl TypeAcls {
    fn map(&self, pattern_type: PatternType) -> Option<&BTreeMap<String, Entries>> {
        match pattern_type {
            PatternType::Literal => Some(&self.literal),
            PatternType::Prefixed => Some(&self.prefixed),
            _ => None,
        }
    }

    fn map_mut(&mut self, pattern_type: PatternType) -> Option<&mut BTreeMap<String, Entries>> {
        match pattern_type {
            PatternType::Literal => Some(&mut self.literal),
            PatternType::Prefixed => Some(&mut self.prefixed),
            _ => None,
        }
    }

    /// Calls `f` with every (pattern type, name, entries) that applies to the resource `name`:
    /// the equal literal, each prefix, then the literal wildcard. Stops when `f` breaks.
    pub(crate) fn for_each_covering<'a>(
        &'a self,
        name: &str,
        mut f: impl FnMut(PatternType, &'a str, &'a Entries) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if let Some((key, entries)) = self.literal.get_key_value(name) {
            f(PatternType::Literal, key, entries)?;
        }
        for_each_prefix_of(&self.prefixed, name, |key, entries| {
            f(PatternType::Prefixed, key, entries)
        })?;
        if name != WILDCARD_RESOURCE {
            if let Some((key, entries)) = self.literal.get_key_value(WILDCARD_RESOURCE) {
                f(PatternType::Literal, key, entries)?;
            }
        }
        ControlFlow::Continue(())
    }

    fn is_empty(&self) -> bool {
        self.literal.is_empty() && self.prefixed.is_empty()
    }
}

/// Calls `f` for each key of `map` that is a prefix of `name` (longest first), visiting no
/// other key. Each step takes the greatest key not above a bound: if it is a prefix of `name` it
/// is reported and the bound drops below it; otherwise no key between it and the bound is a
/// prefix, and every remaining prefix is at most `name` cut at the common prefix of the two,
/// which becomes the new (inclusive) bound. Each step shortens the bound, so the walk takes at
/// most `name.len()` map lookups.
pub(crate) fn for_each_prefix_of<'a, V>(
    map: &'a BTreeMap<String, V>,
    name: &str,
    mut f: impl FnMut(&'a str, &'a V) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let mut upper: Bound<&str> = Bound::Included(name);
    loop {
        let Some((key, value)) = map.range::<str, _>((Bound::Unbounded, upper)).next_back() else {
            return ControlFlow::Continue(());
        };
        let common = common_prefix_len(key, name);
        if common == key.len() {
            f(key, value)?;
            upper = Bound::Excluded(&name[..common]);
        } else {
            // `common` may fall inside a multi-byte character: no key ending there is valid
            // UTF-8, so step back to a character boundary.
            let mut cut = common;
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            upper = Bound::Included(&name[..cut]);
        }
    }
}

/// The length in bytes of the longest common prefix of `a` and `b`.
fn common_prefix_len(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Every stored ACL, indexed by resource type, pattern type and name.
#[derive(Clone, Debug, Default)]
pub(crate) struct AclIndex {
    by_type: BTreeMap<ResourceType, TypeAcls>,
    len: usize,
}

impl AclIndex {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn of_type(&self, resource_type: ResourceType) -> Option<&TypeAcls> {
        self.by_type.get(&resource_type)
    }

    /// Stores `binding`; false if it was already stored.
    pub(crate) fn add(&mut self, binding: AclBinding) -> Result<bool, AclError> {
        binding.check_storable()?;
        let AclBinding { pattern, entry } = binding;
        let type_acls = self.by_type.entry(pattern.resource_type).or_default();
        let Some(map) = type_acls.map_mut(pattern.pattern_type) else {
            return Err(AclError::InvalidPatternType(pattern.pattern_type));
        };
        let added = map.entry(pattern.name).or_default().insert(entry);
        if added {
            self.len += 1;
        }
        Ok(added)
    }

    /// Removes `binding`; false if it was not stored.
    pub(crate) fn remove(&mut self, binding: &AclBinding) -> bool {
        let pattern = &binding.pattern;
        let Some(type_acls) = self.by_type.get_mut(&pattern.resource_type) else {
            return false;
        };
        let Some(map) = type_acls.map_mut(pattern.pattern_type) else {
            return false;
        };
        let Some(entries) = map.get_mut(pattern.name.as_str()) else {
            return false;
        };
        let removed = entries.remove(&binding.entry);
        if entries.is_empty() {
            map.remove(pattern.name.as_str());
        }
        if type_acls.is_empty() {
            self.by_type.remove(&pattern.resource_type);
        }
        if removed {
            self.len -= 1;
        }
        removed
    }

    /// The stored bindings `filter` selects, in the index's order.
    pub(crate) fn matching(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let mut out = Vec::new();
        let types: Vec<(&ResourceType, &TypeAcls)> = match filter.pattern.resource_type {
            ResourceType::Any => self.by_type.iter().collect(),
            t => self.by_type.get_key_value(&t).into_iter().collect(),
        };
        for (&resource_type, type_acls) in types {
            let mut visit = |pattern_type: PatternType, name: &str, entries: &Entries| {
                let pattern = ResourcePattern::new(resource_type, name, pattern_type);
                if filter.pattern.matches(&pattern) {
                    for entry in entries.iter().filter(|e| filter.entry.matches(e)) {
                        out.push(AclBinding::new(pattern.clone(), entry.clone()));
                    }
                }
            };
            match (filter.pattern.name.as_deref(), filter.pattern.pattern_type) {
                // With a name, only a few patterns can match: look them up.
                (Some(name), PatternType::Match) => {
                    let mut found: Vec<(PatternType, &str, &Entries)> = Vec::new();
                    let _ = type_acls.for_each_covering(name, |pt, key, entries| {
                        found.push((pt, key, entries));
                        ControlFlow::Continue(())
                    });
                    found.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
                    for (pt, key, entries) in found {
                        visit(pt, key, entries);
                    }
                }
                (Some(name), pattern_type) => {
                    for pt in [PatternType::Literal, PatternType::Prefixed] {
                        if pattern_type != PatternType::Any && pattern_type != pt {
                            continue;
                        }
                        if let Some(entries) = type_acls.map(pt).and_then(|m| m.get(name)) {
                            visit(pt, name, entries);
                        }
                    }
                }
                (None, _) => {
                    for pt in [PatternType::Literal, PatternType::Prefixed] {
                        for (name, entries) in type_acls.map(pt).into_iter().flatten() {
                            visit(pt, name, entries);
                        }
                    }
                }
            }
        }
        out
    }
}
