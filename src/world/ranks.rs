//! Who does what: rank 0 is the primary; the other ranks form replica groups — one per
//! node by default (ranks sharing memory), or consecutive blocks of `--group-size` — whose
//! lowest rank is the leader.

/// The assignment of every world rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Group of each world rank (`None` for the primary).
    pub group_of: Vec<Option<u32>>,
    /// World rank of each group's leader.
    pub leaders: Vec<usize>,
}

impl Layout {
    /// Number of groups.
    pub fn groups(&self) -> u32 {
        self.leaders.len() as u32
    }

    /// Ranks in group `g`.
    pub fn ranks_of(&self, g: u32) -> usize {
        self.group_of.iter().filter(|x| **x == Some(g)).count()
    }
}

/// Builds the layout of a world of `node_of.len()` ranks, `node_of[r]` being an identifier of
/// rank r's node, with groups of `group_size` ranks if given, else one group per node.
pub fn layout(node_of: &[u64], group_size: Option<usize>) -> Result<Layout, String> {
    let world = node_of.len();
    if world < 2 {
        return Err(format!(
            "aiperf run needs at least 2 ranks (the primary and one replica), got {world}: launch it with mpirun -np N, N >= 2"
        ));
    }
    let mut group_of = vec![None; world];
    let mut leaders = Vec::new();
    match group_size {
        Some(0) => return Err("--group-size must be at least 1".into()),
        Some(g) => {
            let replicas = world - 1;
            if !replicas.is_multiple_of(g) {
                return Err(format!(
                    "{world} ranks leave {replicas} replicas, not a multiple of --group-size {g}: use -np {} or -np {}",
                    1 + replicas / g * g,
                    1 + (replicas / g + 1) * g
                ));
            }
            for (r, slot) in group_of.iter_mut().enumerate().skip(1) {
                let grp = (r - 1) / g;
                if grp == leaders.len() {
                    leaders.push(r);
                }
                *slot = Some(grp as u32);
            }
        }
        None => {
            let mut nodes: Vec<u64> = Vec::new();
            for r in 1..world {
                let grp = match nodes.iter().position(|&n| n == node_of[r]) {
                    Some(i) => i,
                    None => {
                        nodes.push(node_of[r]);
                        leaders.push(r);
                        nodes.len() - 1
                    }
                };
                group_of[r] = Some(grp as u32);
            }
            let sizes: Vec<usize> = (0..leaders.len())
                .map(|g| group_of.iter().filter(|x| **x == Some(g as u32)).count())
                .collect();
            if sizes.iter().any(|&s| s != sizes[0]) {
                return Err(format!(
                    "nodes hold different numbers of replica ranks ({sizes:?}, the primary's node one fewer): give --group-size to form equal groups"
                ));
            }
        }
    }
    Ok(Layout { group_of, leaders })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_group_size_blocks() {
        let l = layout(&[0; 7], Some(2)).unwrap();
        assert_eq!(
            l.group_of,
            vec![None, Some(0), Some(0), Some(1), Some(1), Some(2), Some(2)]
        );
        assert_eq!(l.leaders, vec![1, 3, 5]);
        assert_eq!((l.groups(), l.ranks_of(1)), (3, 2));
        let e = layout(&[0; 6], Some(2)).unwrap_err();
        assert!(
            e.contains("5 replicas, not a multiple of --group-size 2")
                && e.contains("-np 5 or -np 7"),
            "{e}"
        );
        assert!(layout(&[0], None).unwrap_err().contains("at least 2 ranks"));
    }

    #[test]
    fn one_group_per_node() {
        // Two nodes: ranks 0-4 on node 10 (the primary among them), 5-8 on node 20.
        let nodes = [10, 10, 10, 10, 10, 20, 20, 20, 20];
        let l = layout(&nodes, None).unwrap();
        assert_eq!(l.leaders, vec![1, 5]);
        assert_eq!(l.ranks_of(0), 4);
        let uneven = [10, 10, 10, 20, 20, 20, 20];
        assert!(layout(&uneven, None).unwrap_err().contains("--group-size"));
    }
}
