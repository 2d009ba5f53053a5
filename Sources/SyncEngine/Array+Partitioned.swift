extension Array {
    func partitioned(_ isFirst: (Element) -> Bool) -> ([Element], [Element]) {
        var a: [Element] = [], b: [Element] = []
        for e in self { if isFirst(e) { a.append(e) } else { b.append(e) } }
        return (a, b)
    }
}
