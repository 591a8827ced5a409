package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// Scheme is the URL scheme this package registers with fencelock.Register.
const Scheme = "dynamodb"

func init() { fencelock.Register(Scheme, &URLOpener{}) }

// DefaultRequestTimeout bounds each HTTP request of a client opened from a
// URL (see request_timeout).
const DefaultRequestTimeout = 5 * time.Second

// URLOpener opens dynamodb:// URLs:
//
//	dynamodb://TABLE[?param=value&...]
//
// Query parameters, besides fencelock's own prefix, ttl and wait:
//
//	region=us-east-1        AWS region (default: from the SDK's config chain)
//	endpoint=http://h:8000  a non-AWS endpoint (dynalite, DynamoDB Local)
//	create_table=true       create TABLE (on-demand billing) if missing
//	poll_interval=50ms      Config.PollInterval
//	owner=NAME              Config.Owner
//	mixed_fleet=true        Config.MixedFleet
//	request_timeout=5s      per-request HTTP timeout (default 5s)
//	dummy_credentials=true  sign with fixed dummy credentials, for local
//	                        emulators that check only that requests are signed
//
// The HTTP client keeps at most 64 connections to the endpoint (the
// requests beyond that wait for one), so a Client's goroutines stay
// bounded however many leases it renews.
//
// Credentials come from the SDK's default chain (environment, shared
// config, SSO, web identity, container or instance role) unless the
// Credentials field is set; they never appear in URLs, logs or errors.
// Opening checks the table's key schema with DescribeTable.
type URLOpener struct {
	// Credentials, if not nil, replaces the SDK's default credential chain.
	Credentials aws.CredentialsProvider
	// HTTPClient, if not nil, replaces the HTTP client (and then
	// request_timeout does not apply).
	HTTPClient ddb.HTTPClient
	// Configure, if not nil, is called with the DynamoDB client options
	// before the client is made.
	Configure func(*ddb.Options)
}

var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// OpenBackendURL implements fencelock.URLOpener.
func (o *URLOpener) OpenBackendURL(ctx context.Context, u *url.URL) (driver.Backend, error) {
	p, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	var loads []func(*config.LoadOptions) error
	if p.region != "" {
		loads = append(loads, config.WithRegion(p.region))
	}
	switch {
	case o.Credentials != nil:
		loads = append(loads, config.WithCredentialsProvider(o.Credentials))
	case p.dummyCreds:
		loads = append(loads, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("fencelock", "dummy", "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("dynamodb: loading the AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, fmt.Errorf("%w: no AWS region: add ?region=... to the URL or set AWS_REGION", driver.ErrInvalid)
	}
	closeFn := func() {}
	hc := o.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// A bounded pool: goroutines stay O(1) per Client however many
		// leases renew at once (requests beyond it queue).
		tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = 64, 64
		hc = &http.Client{Transport: tr, Timeout: p.requestTimeout}
		closeFn = tr.CloseIdleConnections
	}
	client := ddb.NewFromConfig(awsCfg, func(do *ddb.Options) {
		if p.endpoint != "" {
			do.BaseEndpoint = aws.String(p.endpoint)
		}
		do.HTTPClient = hc
		do.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			// No client-side retry quota: after a burst of failures it
			// would refuse requests that the service would serve.
			so.RateLimiter = ratelimit.None
		})
		if o.Configure != nil {
			o.Configure(do)
		}
	})
	if err := ensureTable(ctx, client, p.table, p.createTable); err != nil {
		closeFn()
		return nil, err
	}
	return newBackend(client, p.cfg, closeFn), nil
}

type urlParams struct {
	table, region, endpoint string
	createTable, dummyCreds bool
	requestTimeout          time.Duration
	cfg                     Config
}

func parseURL(u *url.URL) (urlParams, error) {
	var p urlParams
	if u.Scheme != Scheme {
		return p, fmt.Errorf("%w: scheme %q: use dynamodb://TABLE", driver.ErrInvalid, u.Scheme)
	}
	q := u.Query()
	if err := fencelock.UnknownParams(q, "region", "endpoint", "create_table", "poll_interval", "owner", "mixed_fleet", "request_timeout", "dummy_credentials"); err != nil {
		return p, err
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return p, fmt.Errorf("%w: query parameter %q given %d times: give it once", driver.ErrInvalid, k, len(vs))
		}
	}
	if u.User != nil {
		return p, fmt.Errorf("%w: dynamodb URLs carry no credentials: use the SDK's credential chain (environment, profile, role) or URLOpener.Credentials", driver.ErrInvalid)
	}
	p.table = u.Host
	if u.Path != "" && u.Path != "/" {
		return p, fmt.Errorf("%w: dynamodb URL has a path %q: the table goes in the host position, dynamodb://TABLE", driver.ErrInvalid, u.Path)
	}
	if !tableName.MatchString(p.table) {
		return p, fmt.Errorf("%w: table name %q: want 3 to 255 of a-z A-Z 0-9 _ . -, as in dynamodb://locks?region=us-east-1", driver.ErrInvalid, p.table)
	}
	p.cfg.Table = p.table
	p.region = q.Get("region")
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
			return p, fmt.Errorf("%w: endpoint=%q: want http://host:port or https://host", driver.ErrInvalid, e)
		}
		p.endpoint = e
	}
	var err error
	bools := []struct {
		name string
		dst  *bool
	}{{"create_table", &p.createTable}, {"mixed_fleet", &p.cfg.MixedFleet}, {"dummy_credentials", &p.dummyCreds}}
	for _, bp := range bools {
		if v := q.Get(bp.name); v != "" {
			if *bp.dst, err = strconv.ParseBool(v); err != nil {
				return p, fmt.Errorf("%w: %s=%q: want true or false", driver.ErrInvalid, bp.name, v)
			}
		}
	}
	p.requestTimeout = DefaultRequestTimeout
	durs := []struct {
		name string
		dst  *time.Duration
	}{{"poll_interval", &p.cfg.PollInterval}, {"request_timeout", &p.requestTimeout}}
	for _, dp := range durs {
		if v := q.Get(dp.name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return p, fmt.Errorf("%w: %s=%q: want a positive Go duration such as 50ms or 2s", driver.ErrInvalid, dp.name, v)
			}
			*dp.dst = d
		}
	}
	if q.Has("owner") && q.Get("owner") == "" {
		return p, fmt.Errorf("%w: owner= is empty: give a name or drop the parameter", driver.ErrInvalid)
	}
	p.cfg.Owner = q.Get("owner")
	return p, nil
}

// ensureTable checks that table exists with the lock key schema, creating
// it (on-demand billing) if it is missing and create is set.
func ensureTable(ctx context.Context, c *ddb.Client, table string, create bool) error {
	out, err := c.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: &table})
	var rnf *types.ResourceNotFoundException
	if errors.As(err, &rnf) {
		if !create {
			return fmt.Errorf("%w: %w", driver.ErrInvalid, missingTable(table))
		}
		if err := CreateTable(ctx, c, table); err != nil {
			return err
		}
		out, err = c.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: &table})
	}
	if err != nil {
		return classify(ctx, "describe-table", table, err)
	}
	return checkSchema(out.Table)
}

// checkSchema verifies the lock key schema: partition key "key" of type S,
// no sort key.
func checkSchema(t *types.TableDescription) error {
	ok := len(t.KeySchema) == 1 && aws.ToString(t.KeySchema[0].AttributeName) == attrKey && t.KeySchema[0].KeyType == types.KeyTypeHash
	if ok {
		ok = false
		for _, ad := range t.AttributeDefinitions {
			if aws.ToString(ad.AttributeName) == attrKey && ad.AttributeType == types.ScalarAttributeTypeS {
				ok = true
			}
		}
	}
	if !ok {
		return fmt.Errorf("%w: table %q has key schema %s: the lock table needs partition key %q of type S and no sort key (the AWS DynamoDB Lock Client's default layout)",
			driver.ErrInvalid, aws.ToString(t.TableName), describeSchema(t), attrKey)
	}
	return nil
}

func describeSchema(t *types.TableDescription) string {
	s := ""
	for _, k := range t.KeySchema {
		typ := "?"
		for _, ad := range t.AttributeDefinitions {
			if aws.ToString(ad.AttributeName) == aws.ToString(k.AttributeName) {
				typ = string(ad.AttributeType)
			}
		}
		s += fmt.Sprintf("[%s %s %s]", aws.ToString(k.AttributeName), typ, k.KeyType)
	}
	return s
}

// CreateTable creates a lock table (partition key "key" of type S,
// on-demand billing) and waits until it is active. A table that already
// exists is not an error.
func CreateTable(ctx context.Context, c *ddb.Client, table string) error {
	_, err := c.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            &table,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return classify(ctx, "create-table", table, err)
	}
	w := ddb.NewTableExistsWaiter(c, func(o *ddb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &ddb.DescribeTableInput{TableName: &table}, 5*time.Minute); err != nil {
		return classify(ctx, "create-table", table, err)
	}
	return nil
}

// RewriteStoreAddrs implements fencelock.AddrRewriter (the conformance
// suite's fault proxy stands in front of the endpoint). Only a URL with an
// http:// endpoint= (dynalite, DynamoDB Local) can be rewritten: AWS's
// regional HTTPS endpoints are named by their certificates.
func (o *URLOpener) RewriteStoreAddrs(u *url.URL, rewrite func(addr string) (string, error)) (*url.URL, error) {
	ep := u.Query().Get("endpoint")
	if !strings.HasPrefix(ep, "http://") {
		return nil, fmt.Errorf("%w: only an endpoint=http://host:port URL can be rewritten (an HTTPS endpoint's certificate names its host)", driver.ErrInvalid)
	}
	u2 := *u
	if _, err := fencelock.RewriteAddrParam(&u2, "endpoint", "80", rewrite); err != nil {
		return nil, err
	}
	return &u2, nil
}
