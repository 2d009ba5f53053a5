import ItemModel
import Testing

@Suite struct ItemNameTests {
    @Test(arguments: ["a", "notes.txt", "Ünïcödé ✓", "with space", ".hidden", "...", String(repeating: "x", count: 255), String(repeating: "é", count: 127)])
    func acceptsValidNames(_ name: String) throws {
        #expect(try ItemName(name).rawValue == name)
    }

    @Test func refusesEachInvalidKindWithItsReason() {
        #expect(throws: ItemName.Invalid.empty) { try ItemName("") }
        #expect(throws: ItemName.Invalid.dotOrDotDot) { try ItemName(".") }
        #expect(throws: ItemName.Invalid.dotOrDotDot) { try ItemName("..") }
        #expect(throws: ItemName.Invalid.containsSlash) { try ItemName("a/b") }
        #expect(throws: ItemName.Invalid.containsNUL) { try ItemName("a\u{0}b") }
        #expect(throws: ItemName.Invalid.tooLong(byteCount: 256)) { try ItemName(String(repeating: "x", count: 256)) }
        // 128 two-byte characters: 256 bytes, though only 128 characters.
        #expect(throws: ItemName.Invalid.tooLong(byteCount: 256)) { try ItemName(String(repeating: "é", count: 128)) }
        #expect(throws: ItemName.Invalid.notUTF8) { try ItemName(bytes: [0x61, 0xFF, 0x62]) }
        #expect(throws: ItemName.Invalid.notUTF8) { try ItemName(bytes: [0xC3]) }
    }

    @Test func bytesRoundTrip() throws {
        let name = try ItemName(bytes: Array("café".utf8))
        #expect(Array(name.rawValue.utf8) == Array("café".utf8))
    }

    @Test func ordersByBytesLikeTheCLocale() throws {
        let names = try ["b", "B", "a", "é", "Z"].map { try ItemName($0) }.sorted()
        #expect(names.map(\.rawValue) == ["B", "Z", "a", "b", "é"])
    }

    @Test func noSyncAndScopes() throws {
        #expect(try ItemName("cache.nosync").isNoSync)
        #expect(try !ItemName("nosync.txt").isNoSync)
        let path = ItemPath([try ItemName("Documents"), try ItemName("build.nosync"), try ItemName("a.o")])
        #expect(path.isInDocumentsScope && path.isExcludedFromSync)
        #expect(path.description == "/Documents/build.nosync/a.o")
        #expect(!ItemPath([try ItemName("Data")]).isInDocumentsScope)
    }
}

@Suite struct IdentifierTests {
    @Test func itemIDsAreRandomAndWellFormed() {
        let a = ItemID.random(), b = ItemID.random()
        #expect(a != b && a.rawValue.count == 32 && a.isWellFormed)
        #expect(ItemID.root.isWellFormed)
        #expect(!ItemID("../etc").isWellFormed && !ItemID("").isWellFormed && !ItemID("ABC").isWellFormed)
    }

    @Test func revisionsCompareForEqualityOnly() {
        #expect(Revision("7") == Revision("7"))
        #expect(Revision("7") != Revision("8"))
    }

    @Test func containerIDs() throws {
        #expect(try ContainerID("iCloud.com.example.app").rawValue == "iCloud.com.example.app")
        for bad in ["", "a/b", "..", "with space", String(repeating: "x", count: 129), "ü"] {
            #expect(throws: ContainerID.Invalid.self) { try ContainerID(bad) }
        }
    }

    @Test func digests() throws {
        #expect(throws: ContentDigest.Invalid.self) { try ContentDigest(hex: "abc") }
        #expect(throws: ContentDigest.Invalid.self) { try ContentDigest(hex: String(repeating: "A", count: 64)) }
        #expect(ContentDigest.of(Array("abc".utf8)).hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(ContentDigest.of([UInt8]()) == .empty)
    }
}
