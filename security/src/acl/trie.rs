//! A radix trie over byte strings whose nodes hold values: the index of prefixed ACLs.
//!
//! A lookup walks the name once and visits the values of every stored key that is a prefix of
//! it: O(|name| + visited values), independent of how many keys are stored. Keys are `str`,
//! so a key that ends inside a multi-byte character cannot exist, and byte prefixes of a
//! name are exactly its string prefixes.

/// A radix trie mapping string keys to lists of values.
#[derive(Debug, Clone)]
pub(crate) struct PrefixTrie<V> {
    root: Node<V>,
}

#[derive(Debug, Clone)]
struct Node<V> {
    /// The values stored under the key that ends at this node.
    values: Vec<V>,
    /// Children, sorted by the first byte of their (non-empty) labels, which differ.
    children: Vec<Edge<V>>,
}

#[derive(Debug, Clone)]
struct Edge<V> {
    label: Box<[u8]>,
    node: Node<V>,
}

impl<V> Default for PrefixTrie<V> {
    fn default() -> Self {
        Self {
            root: Node::default(),
        }
    }
}

impl<V> Default for Node<V> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            children: Vec::new(),
        }
    }
}

impl<V> Node<V> {
    fn is_empty(&self) -> bool {
        self.values.is_empty() && self.children.is_empty()
    }

    fn child(&self, first: u8) -> Result<usize, usize> {
        self.children.binary_search_by_key(&first, |e| e.label[0])
    }

    fn insert(&mut self, key: &[u8], value: V) {
        let Some(&first) = key.first() else {
            self.values.push(value);
            return;
        };
        match self.child(first) {
            Err(at) => {
                let node = Self {
                    values: vec![value],
                    children: Vec::new(),
                };
                self.children.insert(
                    at,
                    Edge {
                        label: key.into(),
                        node,
                    },
                );
            }
            Ok(i) => {
                let edge = &mut self.children[i];
                let common = common_prefix_len(&edge.label, key);
                if common < edge.label.len() {
                    // Split the edge: a new node at the common prefix, the old node below it.
                    let old = std::mem::take(&mut edge.node);
                    let tail: Box<[u8]> = edge.label[common..].into();
                    edge.label = edge.label[..common].into();
                    edge.node.children.push(Edge {
                        label: tail,
                        node: old,
                    });
                }
                edge.node.insert(&key[common..], value);
            }
        }
    }

    /// Removes the first value under `key` for which `pred` holds; true if one was.
    fn remove(&mut self, key: &[u8], pred: &mut impl FnMut(&V) -> bool) -> bool {
        let Some(&first) = key.first() else {
            let Some(at) = self.values.iter().position(&mut *pred) else {
                return false;
            };
            self.values.remove(at);
            return true;
        };
        let Ok(i) = self.child(first) else {
            return false;
        };
        let edge = &mut self.children[i];
        let Some(rest) = key.strip_prefix(&*edge.label) else {
            return false;
        };
        if !edge.node.remove(rest, pred) {
            return false;
        }
        if edge.node.is_empty() {
            self.children.remove(i);
        } else if edge.node.values.is_empty() && edge.node.children.len() == 1 {
            // A node with no values and one child is merged into its edge.
            let Edge { label, node } = edge.node.children.pop().expect("one child");
            edge.label = [&*edge.label, &*label].concat().into();
            edge.node = node;
        }
        true
    }
}

fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<V> PrefixTrie<V> {
    /// Adds `value` under `key` (values under one key are kept in insertion order).
    pub(crate) fn insert(&mut self, key: &str, value: V) {
        self.root.insert(key.as_bytes(), value);
    }

    /// Removes the first value under `key` for which `pred` holds; true if one was. Nodes
    /// left without values are pruned or merged, so the trie's size stays proportional to
    /// the stored keys.
    pub(crate) fn remove(&mut self, key: &str, mut pred: impl FnMut(&V) -> bool) -> bool {
        self.root.remove(key.as_bytes(), &mut pred)
    }

    /// Calls `visit` with the values of every key that is a prefix of `name` (the empty key
    /// and `name` itself included), shortest first, until it returns `false`.
    pub(crate) fn visit_prefixes_of(&self, name: &str, mut visit: impl FnMut(&[V]) -> bool) {
        let mut node = &self.root;
        let mut rest = name.as_bytes();
        loop {
            if !node.values.is_empty() && !visit(&node.values) {
                return;
            }
            let Some(&first) = rest.first() else {
                return;
            };
            let Ok(i) = node.child(first) else {
                return;
            };
            let edge = &node.children[i];
            let Some(after) = rest.strip_prefix(&*edge.label) else {
                return;
            };
            rest = after;
            node = &edge.node;
        }
    }

    /// True if nothing is stored.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.root.is_empty()
    }

    /// The number of nodes, root included (for tests of pruning).
    #[cfg(test)]
    fn node_count(&self) -> usize {
        fn count<V>(n: &Node<V>) -> usize {
            1 + n.children.iter().map(|e| count(&e.node)).sum::<usize>()
        }
        count(&self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn prefixes_of(trie: &PrefixTrie<u32>, name: &str) -> Vec<u32> {
        let mut out = Vec::new();
        trie.visit_prefixes_of(name, |vs| {
            out.extend_from_slice(vs);
            true
        });
        out
    }

    #[test]
    fn finds_every_stored_prefix_of_a_name() {
        let mut t = PrefixTrie::default();
        for (i, k) in ["ab", "a", "abc", "abd", "b", "abcdef", "x"]
            .iter()
            .enumerate()
        {
            t.insert(k, i as u32);
        }
        assert_eq!(prefixes_of(&t, "abcde"), [1, 0, 2]);
        assert_eq!(prefixes_of(&t, "abcdef"), [1, 0, 2, 5]);
        assert_eq!(prefixes_of(&t, "ab"), [1, 0]);
        assert_eq!(prefixes_of(&t, "a"), [1]);
        assert_eq!(prefixes_of(&t, ""), Vec::<u32>::new());
        assert_eq!(prefixes_of(&t, "abx"), [1, 0]);
        assert_eq!(prefixes_of(&t, "c"), Vec::<u32>::new());
        t.insert("", 9);
        assert_eq!(prefixes_of(&t, "c"), [9]);
    }

    #[test]
    fn stops_when_the_visitor_says_so() {
        let mut t = PrefixTrie::default();
        t.insert("a", 1);
        t.insert("ab", 2);
        let mut seen = Vec::new();
        t.visit_prefixes_of("abc", |vs| {
            seen.extend_from_slice(vs);
            false
        });
        assert_eq!(seen, [1]);
    }

    #[test]
    fn removal_prunes_and_merges() {
        let mut t = PrefixTrie::default();
        t.insert("abc", 1);
        t.insert("abd", 2);
        t.insert("ab", 3);
        assert!(!t.remove("ab", |&v| v == 1));
        assert!(!t.remove("a", |_| true));
        assert!(!t.remove("abcd", |_| true));
        assert!(t.remove("ab", |&v| v == 3));
        assert!(t.remove("abd", |_| true));
        // Root -> "abc" only.
        assert_eq!(t.node_count(), 2);
        assert_eq!(prefixes_of(&t, "abcz"), [1]);
        assert!(t.remove("abc", |_| true));
        assert!(t.is_empty());
        assert_eq!(t.node_count(), 1);
    }

    #[test]
    fn multibyte_names() {
        let mut t = PrefixTrie::default();
        t.insert("é", 1); // c3 a9
        t.insert("è", 2); // c3 a8
        assert_eq!(prefixes_of(&t, "école"), [1]);
        assert_eq!(prefixes_of(&t, "ève"), [2]);
        assert_eq!(prefixes_of(&t, "e"), Vec::<u32>::new());
    }

    proptest! {
        /// The trie agrees with a list of (key, value) pairs under random inserts and removes.
        #[test]
        fn agrees_with_a_list(
            ops in prop::collection::vec((any::<bool>(), "[ab]{0,4}", 0u32..4), 0..60),
            names in prop::collection::vec("[abc]{0,5}", 1..8),
        ) {
            let mut trie = PrefixTrie::default();
            let mut list: Vec<(String, u32)> = Vec::new();
            for (insert, key, value) in ops {
                if insert {
                    trie.insert(&key, value);
                    list.push((key, value));
                } else {
                    let at = list.iter().position(|(k, v)| *k == key && *v == value);
                    prop_assert_eq!(trie.remove(&key, |&v| v == value), at.is_some());
                    if let Some(at) = at {
                        list.remove(at);
                    }
                }
            }
            for name in names {
                let mut got = prefixes_of(&trie, &name);
                let mut want: Vec<u32> =
                    list.iter().filter(|(k, _)| name.starts_with(k.as_str())).map(|(_, v)| *v).collect();
                got.sort_unstable();
                want.sort_unstable();
                prop_assert_eq!(got, want);
            }
            if list.is_empty() {
                prop_assert_eq!(trie.node_count(), 1);
            }
        }
    }
}
