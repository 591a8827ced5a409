package dynamodb_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// tableOf is the table named by a dynamodb:// URL.
func tableOf(tb testing.TB, rawURL string) string {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatal(err)
	}
	return u.Host
}

// attrS and attrN are string and number attribute values.
func attrS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func attrN(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
