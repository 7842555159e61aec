//! libstdc++'s `std::sort` (introsort, then insertion sort), step for step.
//! llvm-cov sorts branches with `llvm::sort`, which is `std::sort`: not
//! stable, so elements that compare equal (branches of two instantiations
//! of one template at one place) come out in the order this algorithm
//! leaves them, and lcov's branch numbers follow that order.

const THRESHOLD: usize = 16;

/// Sorts `v` as `std::sort(v.begin(), v.end(), less)` does with GCC's library.
pub(crate) fn sort<T: Clone>(v: &mut [T], less: &dyn Fn(&T, &T) -> bool) {
    if v.len() < 2 {
        return;
    }
    let depth = 2 * (usize::BITS - 1 - v.len().leading_zeros()) as usize;
    introsort_loop(v, depth, less);
    final_insertion_sort(v, less);
}

fn introsort_loop<T: Clone>(mut v: &mut [T], mut depth: usize, less: &dyn Fn(&T, &T) -> bool) {
    while v.len() > THRESHOLD {
        if depth == 0 {
            heap_sort(v, less);
            return;
        }
        depth -= 1;
        let cut = partition_pivot(v, less);
        let (left, right) = v.split_at_mut(cut);
        introsort_loop(right, depth, less);
        v = left;
    }
}

fn partition_pivot<T: Clone>(v: &mut [T], less: &dyn Fn(&T, &T) -> bool) -> usize {
    let mid = v.len() / 2;
    let last = v.len() - 1;
    move_median_to_first(v, 1, mid, last, less);
    unguarded_partition(v, 1, v.len(), less)
}

fn move_median_to_first<T>(v: &mut [T], a: usize, b: usize, c: usize, less: &dyn Fn(&T, &T) -> bool) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(0, pick);
}

/// Partitions `v[first..last]` around the pivot at `v[0]`.
fn unguarded_partition<T>(v: &mut [T], mut first: usize, mut last: usize, less: &dyn Fn(&T, &T) -> bool) -> usize {
    loop {
        while less(&v[first], &v[0]) {
            first += 1;
        }
        last -= 1;
        while less(&v[0], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn final_insertion_sort<T: Clone>(v: &mut [T], less: &dyn Fn(&T, &T) -> bool) {
    if v.len() > THRESHOLD {
        insertion_sort(&mut v[..THRESHOLD], less);
        for i in THRESHOLD..v.len() {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, less);
    }
}

fn insertion_sort<T: Clone>(v: &mut [T], less: &dyn Fn(&T, &T) -> bool) {
    for i in 1..v.len() {
        if less(&v[i], &v[0]) {
            v[..=i].rotate_right(1);
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert<T: Clone>(v: &mut [T], mut last: usize, less: &dyn Fn(&T, &T) -> bool) {
    let value = v[last].clone();
    while less(&value, &v[last - 1]) {
        v[last] = v[last - 1].clone();
        last -= 1;
    }
    v[last] = value;
}

/// `std::__partial_sort(first, last, last)`: `make_heap`, then `sort_heap`.
fn heap_sort<T: Clone>(v: &mut [T], less: &dyn Fn(&T, &T) -> bool) {
    let len = v.len();
    if len >= 2 {
        let mut parent = (len - 2) / 2;
        loop {
            let value = v[parent].clone();
            adjust_heap(v, parent, len, value, less);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    let mut last = len;
    while last > 1 {
        last -= 1;
        let value = v[last].clone();
        v[last] = v[0].clone();
        adjust_heap(v, 0, last, value, less);
    }
}

fn adjust_heap<T: Clone>(v: &mut [T], mut hole: usize, len: usize, value: T, less: &dyn Fn(&T, &T) -> bool) {
    let top = hole;
    let mut child = hole;
    while child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if less(&v[child], &v[child - 1]) {
            child -= 1;
        }
        v[hole] = v[child].clone();
        hole = child;
    }
    if len.is_multiple_of(2) && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        v[hole] = v[child - 1].clone();
        hole = child - 1;
    }
    let mut parent = hole.wrapping_sub(1) / 2;
    while hole > top && less(&v[parent], &value) {
        v[hole] = v[parent].clone();
        hole = parent;
        parent = hole.wrapping_sub(1) / 2;
    }
    v[hole] = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny xorshift, so the test needs no crate and always draws the same.
    fn draws(seed: u64, n: usize, range: u64) -> Vec<u64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % range
            })
            .collect()
    }

    #[test]
    fn it_sorts_every_size_and_keeps_libstdcxx_order_of_equal_keys() {
        for n in [0, 1, 2, 5, 16, 17, 40, 300, 5000] {
            for range in [3, 1000] {
                let keys = draws(n as u64 + range, n, range);
                let mut v: Vec<(u64, usize)> = keys.iter().copied().zip(0..).collect();
                sort(&mut v, &|a, b| a.0 < b.0);
                assert!(v.windows(2).all(|w| w[0].0 <= w[1].0), "n={n} range={range}");
                let mut ids: Vec<usize> = v.iter().map(|e| e.1).collect();
                ids.sort_unstable();
                assert_eq!(ids, (0..n).collect::<Vec<_>>());
            }
        }
    }

    /// What `std::sort` of GCC 12's libstdc++ (Debian 12) leaves for keys
    /// `draws(n + 3, n, 3)` compared by key only: from this C++ program,
    /// built with clang++ 22 -O1:
    /// `for (int n : {17, 40, 100}) { uint64_t x = n + 3; vector<pair<uint64_t, int>> v;
    /// for (int i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; v.push_back({x % 3, i}); }
    /// std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first < b.first; }); … }`
    #[test]
    fn equal_keys_come_out_as_libstdcxx_leaves_them() {
        let expected: [&[usize]; 3] = [
            &[1, 14, 11, 0, 8, 15, 10, 9, 7, 6, 5, 4, 12, 13, 3, 2, 16],
            &[
                10, 20, 19, 22, 17, 23, 24, 28, 30, 7, 5, 3, 38, 31, 1, 34, 26, 25, 35, 36, 37, 0, 14, 13, 12, 11, 8,
                39, 21, 2, 4, 6, 33, 32, 9, 29, 27, 15, 16, 18,
            ],
            &[
                36, 92, 60, 78, 24, 91, 90, 57, 55, 87, 70, 37, 39, 40, 41, 48, 84, 44, 45, 94, 65, 7, 6, 97, 19, 98,
                63, 11, 66, 0, 14, 15, 16, 17, 18, 81, 71, 47, 82, 76, 51, 52, 80, 79, 58, 62, 77, 42, 1, 3, 8, 96, 13,
                93, 22, 23, 27, 89, 29, 88, 86, 85, 34, 35, 38, 46, 95, 83, 75, 74, 73, 99, 32, 2, 4, 5, 9, 10, 12, 20,
                21, 25, 26, 28, 30, 31, 72, 33, 43, 49, 50, 53, 54, 56, 59, 61, 64, 67, 68, 69,
            ],
        ];
        for (n, want) in [17usize, 40, 100].into_iter().zip(expected) {
            let mut v: Vec<(u64, usize)> = draws(n as u64 + 3, n, 3).into_iter().zip(0..).collect();
            sort(&mut v, &|a, b| a.0 < b.0);
            let order: Vec<usize> = v.iter().map(|e| e.1).collect();
            assert_eq!(order, want, "n={n}");
        }
    }
}
