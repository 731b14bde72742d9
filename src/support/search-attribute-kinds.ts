import { SearchAttributeType } from '@temporalio/common';

/**
 * Temporal's names for the types of a custom search attribute, as its CLI, its dev server and its
 * operator API spell them: what the stack registers and the worker checks, whatever the attributes are.
 */
export type SearchAttributeKind = 'Text' | 'Keyword' | 'Int' | 'Double' | 'Bool' | 'Datetime' | 'KeywordList';

/** The name `temporal operator search-attribute create --type` and the dev server use for each SDK type. */
export const searchAttributeKindOf: Readonly<Record<SearchAttributeType, SearchAttributeKind>> = {
  [SearchAttributeType.TEXT]: 'Text',
  [SearchAttributeType.KEYWORD]: 'Keyword',
  [SearchAttributeType.INT]: 'Int',
  [SearchAttributeType.DOUBLE]: 'Double',
  [SearchAttributeType.BOOL]: 'Bool',
  [SearchAttributeType.DATETIME]: 'Datetime',
  [SearchAttributeType.KEYWORD_LIST]: 'KeywordList',
};

// Wire values of temporal.api.enums.v1.IndexedValueType; spelled out here so we need no direct
// dependency on @temporalio/proto just for an enum.
export const indexedValueTypeByKind: Readonly<Record<SearchAttributeKind, number>> = {
  Text: 1,
  Keyword: 2,
  Int: 3,
  Double: 4,
  Bool: 5,
  Datetime: 6,
  KeywordList: 7,
};
