import Foundation
import Testing

@testable import VaultClient

/// `Defaults`' string conversions against `NSString.integerValue` / `doubleValue` on Apple's
/// platforms (CoreFoundation's CFStringScanner.c: `__CFIsWhitespace` skipped before the
/// number, and for an integer also between the sign and the digits), without a vaultd.
@Suite struct DefaultsLeadingNumberTests {
    /// Whitespace is more than ASCII's: no-break space (U+00A0, what a copy from a web page
    /// or a word processor puts before a number), the en/em/thin spaces U+2000–U+200B and the
    /// ideographic space U+3000 are skipped as a space is (swift-corelibs-foundation's
    /// NSString agrees on all of these).
    @Test func unicodeWhitespaceBeforeTheNumberIsSkipped() {
        for space in [
            "\u{00A0}", "\u{2003}", "\u{2009}", "\u{200B}", "\u{3000}", "\u{85}", " \u{00A0}\t",
        ] {
            #expect(
                Defaults.integer(space + "42") == 42, "\(space.unicodeScalars.map { $0.value })")
            #expect(
                Defaults.double(space + "4.5") == 4.5, "\(space.unicodeScalars.map { $0.value })")
        }
        // Not whitespace: the digits must come first then.
        #expect(Defaults.integer("\u{FEFF}42") == 0 && Defaults.integer("x42") == 0)
    }

    /// `integerValue` skips whitespace after the sign too ("- 5" is -5); `doubleValue` does not
    /// (strtod sees "-" alone: 0).
    @Test func integerSkipsWhitespaceAfterItsSign() {
        #expect(
            Defaults.integer("- 5") == -5 && Defaults.integer("+\u{00A0}5") == 5
                && Defaults.integer(" -\t7x") == -7)
        #expect(Defaults.double("- 5") == 0)
    }

    /// `string(forKey:)` of a real: as `NSNumber(value:).stringValue` on Apple's platforms
    /// ("1" for 1, not Swift's "1.0").
    @Test func aRealAsTextIsNSNumbersStringValue() {
        let cases: [(Double, String)] = [
            (1, "1"), (-0.0, "-0"), (0.1, "0.1"), (2.5, "2.5"), (-3, "-3"),
            (123_456_789, "123456789"), (1e20, "1e+20"),
            (1.0 / 3, "0.3333333333333333"), (.leastNonzeroMagnitude, "5e-324"), (.infinity, "inf"),
        ]
        for (value, text) in cases { #expect(Defaults.text(real: value) == text, "\(value)") }
    }

    @Test func edgeCases() {
        #expect(
            ["+", "-", ".", "", " ", "-x", "+-1", "٤٢", "４２"].map(Defaults.integer) == [
                0, 0, 0, 0, 0, 0, 0, 0, 0,
            ])
        #expect(
            Defaults.integer("-9223372036854775808") == .min
                && Defaults.integer("9223372036854775807") == .max)
        #expect(
            Defaults.integer("-9223372036854775807") == -.max
                && Defaults.integer("00000000000000000000000042") == 42)
        #expect(
            ["+", "-", ".", "-.", "+-1", "e5", ".e5"].map(Defaults.double) == [0, 0, 0, 0, 0, 0, 0])
        #expect(
            Defaults.double("1e") == 1 && Defaults.double("1e+") == 1 && Defaults.double("5.") == 5)
        // A point after digits, with none after it, is still the number's (strtod: "1.e3" is 1000).
        #expect(Defaults.double("1.e3") == 1000 && Defaults.double("-2.E-1x") == -0.2)
        #expect(
            Defaults.double("-.5e2") == -50 && Defaults.double("1e-999") == 0
                && Defaults.double("-1e999") == -.infinity)
    }
}
