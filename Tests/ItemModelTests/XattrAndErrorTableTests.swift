import Foundation
import ItemModel
import SyncAPI
import Testing

@Suite struct SyncedXattrTests {
    @Test func acceptsUserAttributes() throws {
        try SyncedXattr.validate(["user.xdg.tags": Data("work".utf8), "user.xdg.comment": Data()])
    }

    @Test func refusesWhatMustNotSync() {
        #expect(throws: SyncedXattr.Invalid.statusAttribute("user.ubiq.pinned")) { try SyncedXattr.validate(["user.ubiq.pinned": Data()]) }
        #expect(throws: SyncedXattr.Invalid.notUserNamespace("security.selinux")) { try SyncedXattr.validate(["security.selinux": Data()]) }
        #expect(throws: SyncedXattr.Invalid.notUserNamespace("user.")) { try SyncedXattr.validate(["user.": Data()]) }
        #expect(throws: SyncedXattr.Invalid.valueTooLarge("user.a")) { try SyncedXattr.validate(["user.a": Data(count: 65_537)]) }
        #expect(throws: SyncedXattr.Invalid.nulInName("user.\0evil")) { try SyncedXattr.validate(["user.\0evil": Data()]) }
        let many = Dictionary(uniqueKeysWithValues: (0..<5).map { ("user.a\($0)", Data(count: 60_000)) })
        #expect(throws: SyncedXattr.Invalid.tooLargeInTotal) { try SyncedXattr.validate(many) }
    }
}

@Suite struct APIErrorTableTests {
    @Test func everyCodeHasAnErrorStatusAndAStableSpelling() {
        for code in APIErrorCode.allCases {
            #expect((400...599).contains(code.httpStatus), "\(code)")
            #expect(code.rawValue == code.rawValue.lowercased() && !code.rawValue.contains(" "))
        }
        #expect(Set(APIErrorCode.allCases.map(\.rawValue)).count == APIErrorCode.allCases.count)
        #expect(APIErrorCode.revisionConflict.httpStatus == 409)
        #expect(APIErrorCode.unauthorized.httpStatus == 401)
        #expect(APIErrorCode.itemNotFound.httpStatus == 404)
    }

    @Test func errorBodiesRoundTrip() throws {
        let body = APIErrorBody(.init(code: .nameExists, message: "taken"))
        let decoded = try JSONDecoder().decode(APIErrorBody.self, from: try JSONEncoder().encode(body))
        #expect(decoded == body)
        let raw = #"{"error":{"code":"revision_conflict","message":"m"}}"#
        #expect(try JSONDecoder().decode(APIErrorBody.self, from: Data(raw.utf8)).error.code == .revisionConflict)
    }
}
